package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/l7"
)

// servedDatapath is the datapath serve (and demo) run with, and what the
// rest of the daemon needs from it. kern is nil with the userspace one.
type servedDatapath struct {
	l7.Datapath
	reason string // why this one: the flag, or what auto found
	kern   *kernelDatapath
}

// selectDatapath resolves --datapath: user; kernel (an error when it
// cannot load); auto tries kernel and falls back to user, logging why.
func selectDatapath(cfg *agent.Config, pinDir string, log *slog.Logger) (*servedDatapath, error) {
	user := func(reason string, attrs ...any) *servedDatapath {
		log.Info("datapath: user", append([]any{"reason", reason}, attrs...)...)
		return &servedDatapath{Datapath: l7.NewUserPath(), reason: reason}
	}
	switch cfg.Datapath {
	case "user":
		return user("--datapath user"), nil
	case "kernel":
		k, err := loadKernelDatapath(pinDir, log)
		if err != nil {
			return nil, fmt.Errorf("kernel datapath: %w", err)
		}
		log.Info("datapath: kernel", "reason", "--datapath kernel")
		return &servedDatapath{Datapath: k.path, reason: "--datapath kernel", kern: k}, nil
	}
	k, err := loadKernelDatapath(pinDir, log)
	if err != nil {
		d := user("auto: kernel datapath unavailable", "err", err)
		d.reason += ": " + err.Error() // the dashboard and GET /api/v1/warden show why
		return d, nil
	}
	log.Info("datapath: kernel", "reason", "auto: kernel datapath loaded")
	return &servedDatapath{Datapath: k.path, reason: "auto: kernel datapath loaded", kern: k}, nil
}

// info names the datapath and why it was chosen (GET /api/v1/warden).
func (d *servedDatapath) info() agent.DatapathInfo {
	if d.kern == nil {
		return agent.DatapathInfo{Name: "user", Reason: d.reason}
	}
	return agent.DatapathInfo{Name: "kernel", Reason: d.reason}
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
		u.SetDial(d.kern.dial.DialTCP)
	}
	return u
}

// pollDial is how the metrics poller connects (nil: plainly).
func (d *servedDatapath) pollDial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.kern == nil {
		return nil
	}
	return d.kern.dial.DialContext
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
	if d.kern == nil {
		return nil
	}
	return []prometheus.Collector{d.kern.path}
}
