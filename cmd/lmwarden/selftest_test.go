package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// mustSelect runs serve's datapath choice over fresh pinned state.
func mustSelect(t *testing.T, mode string) *servedDatapath {
	t.Helper()
	dir := kerneltest.PinDir(t)
	dp, err := selectDatapath(&config.Config{Datapath: mode}, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dp.Close()
		if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
			t.Error(err)
		}
	})
	return dp
}

// skipWhereMsgIsRefused skips a test of the msg datapath where this
// kernel does not pair the warden's connections: msg's self-test refuses
// it there (kernel.ErrUnpaired, Debian 13 backports' 7.3), and the skip
// says so in the self-test's words. A self-test that fails otherwise
// fails the test.
func skipWhereMsgIsRefused(t *testing.T) {
	t.Helper()
	dir := kerneltest.PinDir(t)
	dp, err := selectDatapath(&config.Config{Datapath: "msg"}, dir, slog.New(slog.DiscardHandler))
	if err == nil {
		dp.Close()
	}
	if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if errors.Is(err, kernel.ErrUnpaired) {
		t.Skipf("msg refused by its self-test here: %v (docs/kernel.md, \"Kernels tested\")", kernel.ErrUnpaired)
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestSelftestProvesEachKernelDatapath: the self-test passes over each
// kernel datapath on this kernel, and msg's responses went through the
// kernel (it tests the programs, not the shim's relay).
func TestSelftestProvesEachKernelDatapath(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	for _, mode := range []string{"msg", "skb"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "msg" {
				skipWhereMsgIsRefused(t)
			}
			dp := mustSelect(t, mode)
			if dp.kern == nil || dp.Name() != mode || !strings.Contains(dp.reason, mode+" self-test passed") {
				t.Fatalf("--datapath %s: got %s (%s)", mode, dp.Name(), dp.reason)
			}
			if dp.kern.proof.kernel == 0 {
				t.Fatalf("--datapath %s: the kernel carried no byte of the self-test", mode)
			}
			// The self-test's counts are not a served model's.
			if n := len(dp.Datapath.(selfTestCounts).Counts()); n != 0 {
				t.Fatalf("--datapath %s: %d replicas in the counters after the self-test, want 0", mode, n)
			}
			t.Logf("%s: %s", mode, dp.reason)
		})
	}
}

// TestAutoFallsBackWhenTheKernelLosesAResponsesEnd: a kernel that
// carries the response's last byte to the client instead of passing it
// to the shim (what 6.12 did; injected here with CTL_FAULT_CARRY_END)
// fails msg's self-test, and auto takes the next datapath, saying why.
func TestAutoFallsBackWhenTheKernelLosesAResponsesEnd(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	skipWhereMsgIsRefused(t)
	afterKernelLoad = func(p *kernel.Path) {
		if m, ok := p.Datapath.(*kernel.MsgPath); ok {
			m.FaultCarryEnd(1)
		}
	}
	defer func() { afterKernelLoad = nil }()
	dp := mustSelect(t, "auto")
	if dp.Name() != "skb" || !strings.Contains(dp.reason, "msg: self-test:") || !strings.Contains(dp.reason, "last byte did not reach the shim") {
		t.Fatalf("auto chose %s (%s); want skb, with msg's self-test failure as the reason", dp.Name(), dp.reason)
	}
	t.Logf("auto: %s (%s)", dp.Name(), dp.reason)
}

// TestMsgFallsBackAtRunTimeAndServesEveryRequestInFull: the same fault
// appearing after the self-test passed (from the third exchange on):
// every request is still served in full, byte for byte, on keep-alive
// connections; the exchange whose end the kernel lost is finished after
// the bound, and from then on the shim relays every response; the
// fallback is counted and lmwarden_datapath_info says why.
func TestMsgFallsBackAtRunTimeAndServesEveryRequestInFull(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	skipWhereMsgIsRefused(t)
	dp := mustSelect(t, "auto")
	if dp.Name() != "msg" {
		t.Fatalf("auto chose %s (%s), want msg", dp.Name(), dp.reason)
	}
	msg := dp.Datapath.(*kernel.MsgPath)
	msg.FaultCarryEnd(3)
	upLn, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: selfTestReplica()}
	go srv.Serve(upLn)
	t.Cleanup(func() { srv.Close() })
	m, err := placement.NewModel(config.ModelConfig{
		Name: "m", Frontend: "127.0.0.1:0", Replicas: []string{"http://" + upLn.Addr().String()},
		Affinity: true, SpillThreshold: config.SpillThreshold{N: 8},
		SessionHeaders: config.DefaultSessionHeaders, SessionTTL: time.Minute,
		Policy: config.PolicySticky, VLLMLBStats: "fresh",
	}, placement.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shim := l7.NewShim(m, l7.Options{Datapath: dp.Datapath, Upstreams: dp.upstreams(), Logger: slog.New(slog.DiscardHandler)})
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go shim.Serve(ln)
	t.Cleanup(func() { shim.Close() })
	run := selfTestRun{addr: ln.Addr().String(), m: m}
	for conn := range 2 {
		c, err := run.dial()
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i := range 4 {
			body := []byte(strings.Repeat("x", 1000*(i+1)))
			if err := run.exchange(c, br, "POST", "/stream", body, run.streamWant(len(body))); err != nil {
				t.Fatalf("connection %d, request %d: %v", conn, i, err)
			}
		}
		c.Close()
	}
	why, n := msg.Fallback()
	if n != 1 || !strings.Contains(why, "last byte did not reach the shim") {
		t.Fatalf("fallbacks %d (%q), want 1 with the reason", n, why)
	}
	name, reason := dp.current()
	if name != "user" || !strings.Contains(reason, "fell back") {
		t.Fatalf("datapath info %s (%s), want user and why", name, reason)
	}
	var fallbacks float64
	for _, c := range dp.collectors() {
		if v, err := metricValue(c, "lmwarden_datapath_fallbacks_total"); err == nil {
			fallbacks = v
		}
	}
	if fallbacks != 1 {
		t.Fatalf("lmwarden_datapath_fallbacks_total %v, want 1", fallbacks)
	}
	t.Logf("%d exchanges served in full; %s", run.exchanges, reason)
}

// metricValue is the value of the sample named name that c exports.
func metricValue(c prometheus.Collector, name string) (float64, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return 0, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("%s: not exported", name)
}
