package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// servedDatapath is the datapath serve (and demo) run with, and what the
// rest of the daemon needs from it. kern is nil with the userspace one.
type servedDatapath struct {
	datapath.Datapath
	reason string // why this one: the flag, or what auto found
	kern   *kernelDatapath
}

// The --datapath values: auto tries msg, then skb, then user, and logs why
// it took the one it took; kernel is msg, else skb (an error if neither
// loads); msg, skb and user are just that one.
var datapathModes = map[string][]maps.Mode{
	"auto": {maps.ModeMsg, maps.ModeSkb}, "kernel": {maps.ModeMsg, maps.ModeSkb},
	"msg": {maps.ModeMsg}, "skb": {maps.ModeSkb}, "user": nil,
}

// selectDatapath resolves --datapath.
func selectDatapath(cfg *config.Config, pinDir string, log *slog.Logger) (*servedDatapath, error) {
	modes, ok := datapathModes[cfg.Datapath]
	if !ok {
		return nil, fmt.Errorf("--datapath %q: want auto, kernel, msg, skb or user", cfg.Datapath)
	}
	var why []error
	for _, mode := range modes {
		k, proof, err := proveKernelDatapath(pinDir, mode, log)
		if err != nil {
			log.Warn("datapath unavailable", "datapath", mode, "err", err)
			why = append(why, fmt.Errorf("%s: %w", mode, err))
			if errors.Is(err, maps.ErrLocked) || errors.Is(err, maps.ErrUnsafe) {
				break // the state directory, not the mode: the next mode would meet it too
			}
			continue
		}
		reason := fmt.Sprintf("--datapath %s", cfg.Datapath)
		if len(why) > 0 {
			reason += ": " + joinReasons(why)
		}
		reason += "; " + string(mode) + " " + proof
		log.Info("datapath: "+string(mode), "kernel", k.path.String(), "reason", reason)
		return &servedDatapath{Datapath: k.path.Datapath, reason: reason, kern: k}, nil
	}
	if cfg.Datapath != "auto" && cfg.Datapath != "user" {
		return nil, fmt.Errorf("--datapath %s: %s: %w", cfg.Datapath, joinReasons(why), errors.Join(why...))
	}
	reason := "--datapath " + cfg.Datapath
	if len(why) > 0 {
		reason = "auto: no kernel datapath loads here: " + joinReasons(why)
	}
	if len(why) > 0 {
		log.Warn("datapath: user", "reason", reason)
	} else {
		log.Info("datapath: user", "reason", reason)
	}
	return &servedDatapath{Datapath: datapath.NewUserPath(), reason: reason}, nil
}

// afterKernelLoad, when set (tests only), sees each kernel datapath
// loaded before its self-test runs (to inject a fault into it).
var afterKernelLoad func(*kernel.Path)

// proveKernelDatapath loads the datapath of mode and runs the self-test
// over it (selftest.go); a datapath that fails it is closed, with the
// failure as the error. proof is what the self-test found.
func proveKernelDatapath(pinDir string, mode maps.Mode, log *slog.Logger) (_ *kernelDatapath, proof string, _ error) {
	k, err := loadKernelDatapath(pinDir, mode, log)
	if err != nil {
		return nil, "", err
	}
	if afterKernelLoad != nil {
		afterKernelLoad(k.path)
	}
	start := time.Now()
	p, err := selfTest(k.path)
	if err != nil {
		k.close()
		return nil, "", err
	}
	k.proof = p
	proof = fmt.Sprintf("%s in %s", p, time.Since(start).Round(time.Millisecond))
	log.Info("datapath self-test", "datapath", mode, "result", proof)
	return k, proof, nil
}

// joinReasons puts why each datapath did not load on one line.
func joinReasons(why []error) string {
	s := make([]string, len(why))
	for i, e := range why {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// info names the datapath and why it was chosen (GET /api/v1/warden).
func (d *servedDatapath) info() adminapi.DatapathInfo {
	name, reason := d.current()
	return adminapi.DatapathInfo{Name: name, Reason: reason}
}

// current is the datapath that moves the bytes now, and why: the chosen
// one, or the userspace relay once msg fell back at run time (a response
// whose end the kernel lost: kernel/msg_fallback.go).
func (d *servedDatapath) current() (name, reason string) {
	if fb, ok := d.Datapath.(interface{ Fallback() (string, uint64) }); ok {
		if why, _ := fb.Fallback(); why != "" {
			return "user", d.reason + "; then at run time " + d.Name() + " fell back to the shim's relay: " + why
		}
	}
	return d.Name(), d.reason
}

// Close releases what the datapath loaded (pinned state stays pinned).
func (d *servedDatapath) Close() error {
	if d.kern == nil {
		return nil
	}
	return d.kern.close()
}

// upstreams is the pool of replica connections every shim shares. With a
// kernel datapath each connection is registered before it connects.
func (d *servedDatapath) upstreams() *l7.Upstreams {
	u := l7.NewUpstreams(3*time.Second, 4*time.Second, 32)
	if d.kern != nil {
		u.SetDial(d.kern.path.Upstreams.DialTCP)
	}
	return u
}

// pollDial is how the metrics poller connects (nil: plainly).
func (d *servedDatapath) pollDial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.kern == nil {
		return nil
	}
	return d.kern.path.Polls.DialContext
}

// listen opens the listener a model's shim serves (see listenFrontend).
func (d *servedDatapath) listen(addr string) (*net.TCPListener, error) {
	if d.kern == nil {
		return l7.Listen(addr)
	}
	return d.kern.listenFrontend(addr)
}

// collectors are the datapath's own Prometheus metrics.
func (d *servedDatapath) collectors() []prometheus.Collector {
	out := []prometheus.Collector{datapathInfo{d}}
	if d.kern != nil {
		out = append(out, d.kern.path.Collector)
	}
	return out
}

var descDatapathInfo = prometheus.NewDesc("lmwarden_datapath_info",
	"The datapath this warden runs (1): msg (sk_msg, the kernel's fast path), skb (sk_skb, its fallback) or user (the userspace shim), and why that one.",
	[]string{"datapath", "reason"}, nil)

// datapathInfo exports lmwarden_datapath_info (what `lmwarden status` shows).
type datapathInfo struct{ d *servedDatapath }

func (datapathInfo) Describe(ch chan<- *prometheus.Desc) { ch <- descDatapathInfo }
func (i datapathInfo) Collect(ch chan<- prometheus.Metric) {
	name, reason := i.d.current()
	ch <- prometheus.MustNewConstMetric(descDatapathInfo, prometheus.GaugeValue, 1, name, reason)
}
