package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/sim"
)

// mustSim starts simulated replicas on 127.0.0.1 (free ports) for the test.
func mustSim(tb testing.TB, replicas int, shape string, speed float64) *sim.Servers {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := sim.Serve(ctx, sim.ServerConfig{
		Replicas: replicas, Listen: "127.0.0.1:0", Shape: shape, Profile: mustProfile(tb, "a4000-qwen3-4b"),
		Speed: speed, Model: "qwen3-4b",
	})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); s.Close() })
	return s
}

func TestRealRunAgainstSimWritesReportFiles(t *testing.T) {
	for _, api := range []string{APIAnthropic, APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			s := mustSim(t, 2, sim.ShapePorts, 100)
			urls := s.URLs()
			rep, err := RunReal(context.Background(), RealConfig{
				Target: urls[0], API: api, ReplicaMetrics: urls, Steps: Sessions(2),
				Duration: 90 * time.Second, Arms: mustArms(t, "on"), Seed: 1, Speed: 100,
			})
			if err != nil {
				t.Fatal(err)
			}
			x := rep.Results[0]
			t.Logf("%+v", x)
			if x.Requests == 0 || x.Failed() {
				t.Fatalf("requests %d, errors %d, timeouts %d: %v", x.Requests, x.Errors, x.Timeouts, x.Notes)
			}
			if rep.Replicas != 2 {
				t.Fatalf("found %d replicas, want 2", rep.Replicas)
			}
			if !(x.TTFTP50 > 0) || !(x.HitRate >= 0) || !(x.OutputTokensPerMin > 0) {
				t.Fatalf("missing numbers: %+v", x)
			}
			if x.Load[1] != 0 { // every request went to replica 0 directly
				t.Fatalf("load %v, want everything on replica 0", x.Load)
			}
			dir := t.TempDir()
			if err := rep.Write(dir); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{ReportJSON, ReportCSV, PlotTTFT, PlotHitRate, PlotThroughput, PlotTask} {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil || len(b) == 0 {
					t.Fatalf("%s: %v (%d bytes)", f, err, len(b))
				}
			}
			back, err := ReadReport(filepath.Join(dir, ReportJSON))
			if err != nil || back.Results[0].Requests != x.Requests {
				t.Fatalf("report.json does not read back: %v", err)
			}
		})
	}
}

func TestRealRunCountsRefusedConnectionsAsErrors(t *testing.T) {
	s := mustSim(t, 1, sim.ShapePorts, 100)
	rep, err := RunReal(context.Background(), RealConfig{
		Target: "http://" + testnet.RefusingAddr(t), API: APIAnthropic, Model: "qwen3-4b",
		// Two simulated minutes (1.2 s of wall time): in 20 s (0.2 s)
		// a loaded machine's run once made no attempt at all.
		ReplicaMetrics: s.URLs(), Steps: Sessions(2), Duration: 2 * time.Minute,
		Arms: mustArms(t, "on"), Seed: 1, Speed: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Results[0]
	if x.Errors == 0 || x.Requests != 0 || !x.Failed() {
		t.Fatalf("errors %d, requests %d: refused connections were not counted", x.Errors, x.Requests)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "FAILED") || !strings.Contains(b.String(), "connect") {
		t.Fatalf("the table does not say the step failed:\n%s", b.String())
	}
}

func TestRealRunRejectsMissingSetup(t *testing.T) {
	_, err := RunReal(context.Background(), RealConfig{
		Target: "http://127.0.0.1:1", API: APIAnthropic, ReplicaMetrics: []string{"http://127.0.0.1:1"},
		Steps: Sessions(1), Duration: time.Second, Arms: mustArms(t, "off,on"),
	})
	if err == nil || !strings.Contains(err.Error(), "--admin") {
		t.Fatalf("two arms without --admin: %v", err)
	}
}

// TestRealRunPlaysLongSessionsArrivingAtARate runs the long workload in
// an open loop against simulated replicas over HTTP: sessions arrive,
// compact near the context (from the target's /v1/models unless given) and
// finish.
func TestRealRunPlaysLongSessionsArrivingAtARate(t *testing.T) {
	s := mustSim(t, 2, sim.ShapePorts, 100)
	rep, err := RunReal(context.Background(), RealConfig{
		Target: s.URLs()[0], API: APIOpenAI, ReplicaMetrics: s.URLs(),
		Steps: []Step{{Arrivals: ArrivalsPoisson, PerMin: 4}}, Duration: 10 * time.Minute, Warmup: time.Minute,
		Arms: mustArms(t, "on"), Seed: 4, Speed: 100, Workload: LongShape, MaxContext: 16_384,
		// The simulated replicas run on wall time (Speed 100): on a loaded
		// machine they get through fewer requests. 5 simulated minutes
		// saw 2 compactions alone and 1 beside other tests, 0 a step
		// away from failing; 10 give twice the margin. A request may
		// take 30 simulated minutes (18 s), not 5 (3 s), before it
		// counts as timed out.
		RequestTimeout: 30 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Results[0]
	t.Logf("requests %d, compactions %d, tasks %d (%d unfinished), task p50 %v, live %vx", x.Requests, x.Compactions, x.Completed, x.TasksUnfinished, x.TaskP50, x.LiveContextX)
	if x.Requests == 0 || x.Failed() || x.Compactions == 0 || x.Completed == 0 || !(x.TaskP50 > 0) {
		t.Fatalf("requests %d, errors %d, compactions %d, tasks done %d: %v", x.Requests, x.Errors, x.Compactions, x.Completed, x.Notes)
	}
	if rep.MaxContext != 16_384 || rep.Workload != "long" || !rep.Steps[0].Open() {
		t.Fatalf("report: context %d, workload %q, steps %v", rep.MaxContext, rep.Workload, rep.Steps)
	}
	// Without --max-context the target's own context is used.
	rep, err = RunReal(context.Background(), RealConfig{
		Target: s.URLs()[0], API: APIAnthropic, ReplicaMetrics: s.URLs(), Steps: Sessions(1),
		Duration: 10 * time.Second, Arms: mustArms(t, "on"), Seed: 4, Speed: 100, Workload: LongShape,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := mustProfile(t, "a4000-qwen3-4b").MaxModelLen; rep.MaxContext != want {
		t.Fatalf("context %d, want the target's max_model_len %d", rep.MaxContext, want)
	}
}
