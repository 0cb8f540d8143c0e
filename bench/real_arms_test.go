package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/sim"
)

// mustWardenFront runs the warden (placement, poller, admin API) and the
// userspace shim in front of urls, as `lmwarden serve` does, and returns the
// frontend URL and the warden.
func mustWardenFront(tb testing.TB, urls []string, affinity bool) (string, *agent.Warden) {
	tb.Helper()
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.Admin = "127.0.0.1:0"
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Models[0].Name = "qwen3-4b"
	cfg.Models[0].Frontend = ln.Addr().String()
	cfg.Models[0].Replicas = urls
	quiet := slog.New(slog.DiscardHandler)
	w, err := agent.NewWithOptions(cfg, agent.Options{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	w.Models()[0].SetAffinity(affinity)
	shim := l7.NewShim(w.Models()[0], l7.Options{Logger: quiet})
	go shim.Serve(ln)
	tb.Cleanup(func() { ln.Close(); shim.Close(); cancel(); w.Close() })
	return "http://" + ln.Addr().String(), w
}

// TestRealRunSwitchesPolicyArmsAndRestoresTheWarden runs a policy-named
// arm and "on" against a live warden: each arm's policy is switched in
// through the admin API (the run fails if a switch does not take), and the
// warden is left with the affinity and policy it had before.
func TestRealRunSwitchesPolicyArmsAndRestoresTheWarden(t *testing.T) {
	s := mustSim(t, 2, sim.ShapePorts, 100)
	front, w := mustWardenFront(t, s.URLs(), false)
	rep, err := RunReal(context.Background(), RealConfig{
		Target: front, API: APIAnthropic, Admin: "http://" + w.AdminAddr(), Steps: []int{2},
		Duration: 30 * time.Second, Arms: mustArms(t, "hash,on"), Seed: 3, Speed: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for _, x := range rep.Results {
		if x.Requests == 0 || x.Failed() {
			t.Errorf("arm %s: requests %d, errors %d: %v", x.Arm, x.Requests, x.Errors, x.Notes)
		}
	}
	if got := rep.ArmPolicies["hash"]; got != "policy hash" {
		t.Errorf("hash arm described as %q", got)
	}
	m := w.Models()[0].Status()
	if m.Affinity || m.Policy != string(agent.PolicySticky) {
		t.Errorf("after the run: affinity %v, policy %s; want the warden as found (off, sticky)", m.Affinity, m.Policy)
	}
}
