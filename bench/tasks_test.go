package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestTaskTimesCountFinishedSessionsAndBoundTheUnfinished(t *testing.T) {
	// A window of 100 s. a: 0 → 10 (10 s); b: 5 → 25 (20 s); c starts at
	// 30 and is still going at the close (70 s so far); d failed; e
	// finished but had started before the window (not a task of it).
	r := newRecorder(2)
	r.tasks.sessionStarted("a", 0)
	r.tasks.sessionStarted("b", 5)
	r.tasks.sessionStarted("c", 30)
	r.tasks.sessionStarted("d", 40)
	r.tasks.sessionStarted("a", 3) // a later request of a: the start stays 0
	r.tasks.sessionFinished("a", 10)
	r.tasks.sessionFinished("b", 25)
	r.tasks.sessionFailed("d")
	r.tasks.sessionFinished("e", 50)
	res := r.result(Step{Sessions: 4}, "x", 100, 0)
	// Finished 10 and 20: nearest-rank p50 is the lower middle, p95 the top.
	if res.TaskP50 != 10 || res.TaskP95 != 20 {
		t.Errorf("task p50 %v p95 %v, want 10 and 20", res.TaskP50, res.TaskP95)
	}
	if res.TasksUnfinished != 1 {
		t.Errorf("unfinished %d, want 1 (c; d failed, e is not of this window)", res.TasksUnfinished)
	}
	// With c at 70 s: {10, 20, 70}: p50 = 20, p95 = 70.
	if res.TaskP50Open != 20 || res.TaskP95Open != 70 {
		t.Errorf("with unfinished: p50 %v p95 %v, want 20 and 70", res.TaskP50Open, res.TaskP95Open)
	}
}

func TestFirstAndLaterTurnsArePercentiledApart(t *testing.T) {
	r := newRecorder(1)
	for _, x := range []struct {
		first bool
		ttft  float64
	}{{true, 3}, {false, 0.3}, {true, 1}, {false, 0.1}, {false, 5}, {false, 0.2}, {false, math.NaN()}} {
		r.answered("s", x.first, x.ttft, 100, 0, 10, 0)
	}
	res := r.result(Step{Sessions: 1}, "x", 60, 0)
	// first {1, 3}: p50 1, p95 3; later {0.1, 0.2, 0.3, 5}: p50 0.2, p95 5.
	if res.TTFTFirstP50 != 1 || res.TTFTFirstP95 != 3 || res.TTFTLaterP50 != 0.2 || res.TTFTLaterP95 != 5 {
		t.Fatalf("first %v/%v later %v/%v, want 1/3 and 0.2/5",
			res.TTFTFirstP50, res.TTFTFirstP95, res.TTFTLaterP50, res.TTFTLaterP95)
	}
	if res.Parked != 0 || !math.IsNaN(float64(res.ParkedMax)) || !math.IsNaN(float64(res.TaskP50)) {
		t.Fatalf("nothing parked and no task, got parked %d max %v task %v", res.Parked, res.ParkedMax, res.TaskP50)
	}
}

func TestSubagentsLaterTurnsCachedShareIsOverTheirPromptTokens(t *testing.T) {
	r := newRecorder(1)
	if res := r.result(Step{Sessions: 1}, "x", 60, 0); !math.IsNaN(float64(res.SubagentCached)) {
		t.Fatalf("no subagent turn: %v, want NaN", res.SubagentCached)
	}
	r.tasks.subagentLater(1000, 900)
	r.tasks.subagentLater(3000, 2700)
	r.tasks.subagentLater(1000, 0) // moved or evicted: weighs by its tokens
	if got := r.result(Step{Sessions: 1}, "x", 60, 0).SubagentCached; got != 0.72 {
		t.Fatalf("cached share %v, want 3600/5000 = 0.72", got)
	}
}

func TestParkedWaitsIncludeTheStillParkedAtTheirWaitSoFar(t *testing.T) {
	r := newRecorder(1)
	r.tasks.parkedFor(6, false)
	r.tasks.parkedFor(2, false)
	r.tasks.parkedFor(10, true) // still parked at the close: 10 s so far
	r.tasks.parkedFor(4, false)
	res := r.result(Step{Sessions: 1}, "x", 60, 0)
	// {2, 4, 6, 10}: p50 rank 2 = 4, p95 rank 4 = 10, max 10.
	if res.Parked != 4 || res.ParkedAtClose != 1 || res.ParkedP50 != 4 || res.ParkedP95 != 10 || res.ParkedMax != 10 {
		t.Fatalf("parked %d (at close %d) p50 %v p95 %v max %v, want 4 (1), 4, 10, 10",
			res.Parked, res.ParkedAtClose, res.ParkedP50, res.ParkedP95, res.ParkedMax)
	}
	rep := &Report{Arms: []string{"x"}, Steps: Sessions(1), Results: []Result{res}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "parked max") || !strings.Contains(b.String(), "≥10.0s") {
		t.Fatalf("the table does not show the parked maximum as a lower bound:\n%s", b.String())
	}
}

func TestLiveContextIsTheMeanOverPollsAgainstTheTotalCache(t *testing.T) {
	r := newRecorder(2)
	r.poll([]*replicaSample{{KVCapacity: 100}, {KVCapacity: 300}})
	r.tasks.liveContext(200)
	r.tasks.liveContext(600)
	res := r.result(Step{Sessions: 1}, "x", 60, 0)
	if res.LiveContext != 400 || res.LiveContextX != 1 {
		t.Fatalf("live context %v (%vx), want 400 tokens, 1x of 400", res.LiveContext, res.LiveContextX)
	}
	r = newRecorder(2)
	r.poll([]*replicaSample{{KVCapacity: 100}, nil}) // one replica's size unknown
	r.tasks.liveContext(50)
	if res := r.result(Step{Sessions: 1}, "x", 60, 0); res.LiveContext != 50 || !math.IsNaN(float64(res.LiveContextX)) {
		t.Fatalf("with a capacity unknown: %v (%vx), want 50 and no ratio", res.LiveContext, res.LiveContextX)
	}
	l := liveSet{}
	l.set("a", 10)
	l.set("b", 20)
	l.set("a", 15)
	l.end("b")
	if l.sum() != 15 {
		t.Fatalf("live set sums %v, want 15", l.sum())
	}
}

func TestVirtualRunMeasuresTasksTurnsAndWaitsAtTheWarden(t *testing.T) {
	const timeout = 40 * time.Second
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(4, 24), Duration: 3 * time.Minute,
		Arms: mustArms(t, "cost"), FreshReplicas: true, Seed: 3,
		Admission: config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: timeout},
	})
	if err != nil {
		t.Fatal(err)
	}
	light, _ := rep.Find(4, "cost")
	heavy, _ := rep.Find(24, "cost")
	// 4 sessions of six turns fit: each finishes in well under the window,
	// and no task can be shorter than its six turns' decodes (at least 192
	// tokens each, over 20 ms a decode step on this card).
	if light.Completed < 4 || light.TasksUnfinished != 4 {
		t.Errorf("4 sessions: %d tasks done, %d unfinished; want at least 4 and exactly 4 (a closed loop)", light.Completed, light.TasksUnfinished)
	}
	if !(light.TaskP50 > 6*MinOutputTokens*0.020) || light.TaskP95 < light.TaskP50 {
		t.Errorf("4 sessions: task p50 %v p95 %v", light.TaskP50, light.TaskP95)
	}
	if !(light.TTFTFirstP50 > light.TTFTLaterP50) || light.Parked != 0 {
		t.Errorf("4 sessions: first turns (%v) should be slower than later ones (%v), nothing parked (%d)",
			light.TTFTFirstP50, light.TTFTLaterP50, light.Parked)
	}
	// 24 sessions do not fit: some wait at the warden, never past the
	// timeout (the claim runs at the first poll or request end after it).
	if heavy.Parked == 0 || heavy.ParkedP50 > heavy.ParkedP95 || heavy.ParkedP95 > heavy.ParkedMax {
		t.Errorf("24 sessions: parked %d p50 %v p95 %v max %v", heavy.Parked, heavy.ParkedP50, heavy.ParkedP95, heavy.ParkedMax)
	}
	if float64(heavy.ParkedMax) > (timeout + time.Second).Seconds() {
		t.Errorf("24 sessions: a request waited %vs at the warden, past the %v timeout", heavy.ParkedMax, timeout)
	}
	if !(heavy.LiveContextX > 1.2) || !(light.LiveContextX < 0.5) {
		t.Errorf("live context %v at 24 sessions, %v at 4: want over and well under the cache", heavy.LiveContextX, light.LiveContextX)
	}
}

func TestVirtualAdmissionIsOnByDefaultOnlyPastTheCache(t *testing.T) {
	// policy cost with the model's own admission (mode auto): 8 sessions
	// fit and nobody waits; 24 are twice the cache, admission engages,
	// requests wait at the warden and none past the 60 s bound.
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(8, 24), Warmup: 2 * time.Minute,
		Duration: 3 * time.Minute, Arms: mustArms(t, "cost"), FreshReplicas: true, Seed: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	light, _ := rep.Find(8, "cost")
	heavy, _ := rep.Find(24, "cost")
	if light.Parked != 0 || light.Admission != nil {
		t.Errorf("8 sessions: %d parked, admission %+v: want admission off", light.Parked, light.Admission)
	}
	if heavy.Parked == 0 || heavy.Admission == nil || heavy.Admission.Parked == 0 {
		t.Fatalf("24 sessions: %d parked, admission %+v: want it engaged", heavy.Parked, heavy.Admission)
	}
	if limit := config.DefaultAdmission.Timeout.Seconds() + 1; float64(heavy.ParkedMax) > limit {
		t.Errorf("24 sessions: a request waited %vs, past the bound", heavy.ParkedMax)
	}
	if !(heavy.HitRate > 0.5) {
		t.Errorf("24 sessions: hit rate %v with admission, want the caches kept (over 0.5; about 0.3 without)", heavy.HitRate)
	}
}
