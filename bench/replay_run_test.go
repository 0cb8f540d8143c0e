package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/sim"
)

// replayVirtual replays a generated trace on two A4000 replicas.
func replayVirtual(t *testing.T, tr *Trace, policies string, noHeader bool, tracer Tracer, speeds ...float64) *Report {
	t.Helper()
	return replayVirtualWith(t, tr, policies, func(c *VirtualConfig) { c.NoSessionHeader, c.Trace = noHeader, tracer }, speeds...)
}

func replayVirtualWith(t *testing.T, tr *Trace, policies string, mutate func(*VirtualConfig), speeds ...float64) *Report {
	t.Helper()
	cfg := VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: ReplaySpeeds(speeds...),
		Arms: mustArms(t, policies), Seed: 4, FreshReplicas: true,
		Replay:         &ReplayConfig{Trace: tr},
		SpillThreshold: config.SpillThreshold{N: 64}, // pins hold: these small cards are busy
	}
	mutate(&cfg)
	rep, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestVirtualReplaySendsEveryTurnAfterTheOneBefore(t *testing.T) {
	text, _ := genTrace(5, 24, 4, 2*time.Second, 512)
	tr := mustTrace(t, text, 512)
	var rec TraceRecorder
	rep := replayVirtual(t, tr, "sticky,round-robin", false, &rec, 1, 4)
	if rep.Replay == nil || rep.Replay.Requests != len(tr.Rows) || rep.Replay.Conversations != 24 || !rep.Replay.SessionHeader {
		t.Fatalf("replay info %+v", rep.Replay)
	}
	for _, x := range rep.Results {
		r := x.Replay
		t.Logf("%s %s: hit %.3f (ideal %.3f, cache %.3f), TTFT mean %.2f p99 %.2f, late %d", x.Step, x.Arm, x.HitRate,
			r.IdealHitRate, r.IdealCacheHitRate, x.TTFTMean, x.TTFTP99, r.LateTurns)
		if x.Requests != len(tr.Rows) || x.Failed() || x.Cut != 0 || r.ConversationsDone != 24 || x.Completed != 24 {
			t.Fatalf("%s %s: %d of %d requests, %d conversations done: %v", x.Step, x.Arm, x.Requests, len(tr.Rows), r.ConversationsDone, x.Notes)
		}
		if float64(x.HitRate) > float64(r.IdealHitRate)+0.005 || !(x.TTFTP99 >= x.TTFTP90 && x.TTFTP90 >= x.TTFTP50) {
			t.Fatalf("%s %s: hit rate %.3f above the ideal %.3f, or TTFT percentiles out of order", x.Step, x.Arm, x.HitRate, r.IdealHitRate)
		}
	}
	sticky, _ := rep.FindStep(Step{ReplaySpeed: 4}, "sticky")
	rr, _ := rep.FindStep(Step{ReplaySpeed: 4}, "round-robin")
	if !(sticky.HitRate > rr.HitRate) || sticky.Stayed < 0.99 {
		t.Fatalf("sticky hit %.3f (stayed %.2f) vs round robin %.3f", sticky.HitRate, sticky.Stayed, rr.HitRate)
	}
	slow, _ := rep.FindStep(Step{ReplaySpeed: 1}, "sticky")
	if sticky.Replay.LateTurns < slow.Replay.LateTurns || sticky.Replay.LateTurns == 0 {
		t.Fatalf("late turns at ×4 %d, at ×1 %d: a faster replay must leave turns less time", sticky.Replay.LateTurns, slow.Replay.LateTurns)
	}
	// in every window, a conversation's turn goes after the one before ended
	for _, win := range rec.Windows {
		type turn struct{ sent, done time.Time }
		byConv := map[string]map[int]turn{}
		for _, q := range win.Requests {
			if byConv[q.Session] == nil {
				byConv[q.Session] = map[int]turn{}
			}
			byConv[q.Session][q.Turn] = turn{q.Sent, q.Done}
		}
		for conv, turns := range byConv {
			for k := 1; k < len(turns); k++ {
				if turns[k].sent.Before(turns[k-1].done) {
					t.Fatalf("%s %s: conversation %s turn %d sent %v before turn %d ended", win.Step, win.Arm, conv, k,
						turns[k-1].done.Sub(turns[k].sent), k-1)
				}
			}
		}
	}
}

// Without session headers the conversations are keyed by their bodies'
// start as the shim keys them; with that off too, every request is placed
// as new.
func TestVirtualReplayWithoutSessionHeadersKeysByTheBody(t *testing.T) {
	text, _ := genTrace(6, 20, 4, 3*time.Second, 512)
	tr := mustTrace(t, text, 512)
	with := replayVirtual(t, tr, "sticky", false, nil, 2).Results[0]
	rep := replayVirtual(t, tr, "sticky", true, nil, 2)
	without := rep.Results[0]
	unkeyed := replayVirtualWith(t, tr, "sticky", func(c *VirtualConfig) { c.NoSessionHeader, c.NoBodyKey = true, true }, 2).Results[0]
	t.Logf("stayed with a header %.2f, keyed by the body %.2f, unkeyed %.2f; hit %.3f / %.3f / %.3f",
		with.Stayed, without.Stayed, unkeyed.Stayed, with.HitRate, without.HitRate, unkeyed.HitRate)
	if rep.Replay.SessionHeader || without.Requests != len(tr.Rows) {
		t.Fatalf("replay %+v, %d requests", rep.Replay, without.Requests)
	}
	if !(with.Stayed > 0.99) || !(without.Stayed > 0.99) || !(unkeyed.Stayed < with.Stayed) {
		t.Fatalf("stayed %.2f with a session header, %.2f keyed by the body, %.2f unkeyed", with.Stayed, without.Stayed, unkeyed.Stayed)
	}
}

func TestVirtualReplaySliceStartsCold(t *testing.T) {
	text, _ := genTrace(7, 30, 5, 10*time.Second, 512)
	tr := mustTrace(t, text, 512)
	from, until := 20*time.Second, 50*time.Second
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: ReplaySpeeds(1), Arms: mustArms(t, "sticky"),
		Seed: 1, Replay: &ReplayConfig{Trace: tr, From: from, Until: until},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range tr.Rows {
		if r.At >= from && r.At < until {
			n++
		}
	}
	x := rep.Results[0]
	if x.Requests != n || rep.Replay.Requests != n || n == 0 || n == len(tr.Rows) {
		t.Fatalf("%d requests answered, %d in the slice (of %d)", x.Requests, n, len(tr.Rows))
	}
	if math.IsNaN(float64(x.Replay.IdealCacheHitRate)) || x.Replay.CacheTokens != 2*mustProfile(t, "a4000-qwen3-4b").KVTokens() {
		t.Fatalf("cache ideal %v over %d tokens", x.Replay.IdealCacheHitRate, x.Replay.CacheTokens)
	}
	if _, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: ReplaySpeeds(1), Arms: mustArms(t, "sticky"),
		Replay: &ReplayConfig{Trace: tr, From: time.Hour},
	}); err == nil {
		t.Fatal("an empty slice replayed")
	}
}

func TestRealReplayAgainstSimulatedReplicas(t *testing.T) {
	text, _ := genTrace(8, 12, 3, 5*time.Second, 512)
	tr := mustTrace(t, text, 512)
	s := mustSim(t, 2, sim.ShapePorts, 100)
	rep, err := RunReal(context.Background(), RealConfig{
		Target: s.URLs()[0], API: APIAnthropic, ReplicaMetrics: s.URLs(), Steps: ReplaySpeeds(2),
		Arms: mustArms(t, "on"), Seed: 1, Speed: 100, Replay: &ReplayConfig{Trace: tr}, NoSessionHeader: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Results[0]
	t.Logf("%+v %+v", x, *x.Replay)
	if x.Requests != len(tr.Rows) || x.Failed() || x.Replay.ConversationsDone != 12 || x.Replay.CacheTokens == 0 {
		t.Fatalf("%d of %d requests, %d conversations done, cache %d: %v", x.Requests, len(tr.Rows), x.Replay.ConversationsDone, x.Replay.CacheTokens, x.Notes)
	}
	if !(x.HitRate > 0) || float64(x.HitRate) > float64(x.Replay.IdealHitRate)+0.005 {
		t.Fatalf("hit rate %.3f, ideal %.3f", x.HitRate, x.Replay.IdealHitRate)
	}
	if rep.Workload != WorkloadReplay || rep.Replay.SessionHeader {
		t.Fatalf("report %q %+v", rep.Workload, rep.Replay)
	}
}
