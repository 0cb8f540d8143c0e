package agent

import (
	"math"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

var seriesEpoch = time.Unix(1_700_000_000, 0).UTC()

func TestTokenSeriesSplitsPromptIntoCachedAndComputed(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	at := func(s float64) time.Time { return seriesEpoch.Add(time.Duration(s * float64(time.Second))) }
	ts.Observe("m", 0, TokenCounters{PromptTokens: 1000, PrefixQueries: 1000, PrefixHits: 500, GenerationTokens: 10}, at(0.5))
	// 2,000 prompt tokens of which 1,500 hit the cache, 300 generated.
	ts.Observe("m", 0, TokenCounters{PromptTokens: 3000, PrefixQueries: 3000, PrefixHits: 2000, GenerationTokens: 310}, at(5))

	resp := ts.Snapshot(time.Hour, at(10))
	p := lastPoint(t, resp.Models[0].Pooled)
	if p.PromptCachedPerSec != 150 || p.PromptComputedPerSec != 50 || p.CompletionPerSec != 30 {
		t.Fatalf("point = %+v, want cached 150/s, computed 50/s, completion 30/s", p)
	}
	if p.HitRate == nil || *p.HitRate != 0.75 {
		t.Fatalf("hit rate = %v, want 0.75", p.HitRate)
	}
	if !p.T.Equal(at(0)) {
		t.Fatalf("point time = %v, want slot start %v", p.T, at(0))
	}
}

func TestTokenSeriesFloorsComputedAtZero(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch)
	// Hits counted before the prompt counter caught up: computed is 0, not negative.
	ts.Observe("m", 0, TokenCounters{PromptTokens: 100, PrefixQueries: 400, PrefixHits: 300}, seriesEpoch.Add(time.Second))
	p := lastPoint(t, ts.Snapshot(time.Hour, seriesEpoch.Add(10*time.Second)).Models[0].Pooled)
	if p.PromptComputedPerSec != 0 || p.PromptCachedPerSec != 30 {
		t.Fatalf("point = %+v, want computed 0/s and cached 30/s", p)
	}
}

func TestTokenSeriesTreatsCounterDropAsRestart(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{PromptTokens: 50_000, GenerationTokens: 9_000}, seriesEpoch)
	// The replica restarted: its counters began again at zero and now read 200 / 40.
	ts.Observe("m", 0, TokenCounters{PromptTokens: 200, GenerationTokens: 40}, seriesEpoch.Add(time.Second))
	p := lastPoint(t, ts.Snapshot(time.Hour, seriesEpoch.Add(10*time.Second)).Models[0].Pooled)
	if p.PromptComputedPerSec != 20 || p.CompletionPerSec != 4 {
		t.Fatalf("point = %+v, want computed 20/s and completion 4/s after the restart", p)
	}
}

func TestTokenSeriesPoolsReplicasAndKeepsThemApart(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	for i := range 2 {
		ts.Observe("m", i, TokenCounters{}, seriesEpoch)
	}
	ts.Observe("m", 0, TokenCounters{PromptTokens: 100, PrefixQueries: 100, PrefixHits: 100}, seriesEpoch.Add(time.Second))
	ts.Observe("m", 1, TokenCounters{PromptTokens: 300, PrefixQueries: 300}, seriesEpoch.Add(time.Second))

	m := ts.Snapshot(time.Hour, seriesEpoch.Add(10*time.Second)).Models[0]
	if len(m.Replicas) != 2 {
		t.Fatalf("replicas = %d, want 2", len(m.Replicas))
	}
	if got := lastPoint(t, m.Replicas[0].SeriesStats).PromptCachedPerSec; got != 10 {
		t.Fatalf("replica 0 cached = %v/s, want 10", got)
	}
	if got := lastPoint(t, m.Replicas[1].SeriesStats).PromptComputedPerSec; got != 30 {
		t.Fatalf("replica 1 computed = %v/s, want 30", got)
	}
	pooled := m.Pooled.Summary
	if pooled.PromptCachedTokens != 100 || pooled.PromptComputedTokens != 300 || pooled.HitRate == nil || *pooled.HitRate != 0.25 {
		t.Fatalf("pooled summary = %+v, want 100 cached, 300 computed, hit rate 0.25", pooled)
	}
}

func TestTokenSeriesFirstPollIsOnlyABaseline(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{PromptTokens: 1e9, PrefixQueries: 1e9, PrefixHits: 1e9}, seriesEpoch)
	s := ts.Snapshot(time.Hour, seriesEpoch.Add(20*time.Second)).Models[0].Pooled.Summary
	if s.PromptCachedTokens != 0 || s.PromptComputedTokens != 0 || s.HitRate != nil {
		t.Fatalf("summary = %+v, want nothing counted from the first poll", s)
	}
}

func TestTokenSeriesWindowCoversCompleteSlotsOnly(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch.Add(21*time.Second))
	ts.Observe("m", 0, TokenCounters{PromptTokens: 10}, seriesEpoch.Add(25*time.Second)) // slot in progress at 29 s

	resp := ts.Snapshot(time.Minute, seriesEpoch.Add(29*time.Second))
	pts := resp.Models[0].Pooled.Points
	if len(pts) != 6 || resp.WindowSeconds != 60 || resp.StepSeconds != 10 {
		t.Fatalf("points = %d, window %v s, step %v s; want 6 points over 60 s at 10 s", len(pts), resp.WindowSeconds, resp.StepSeconds)
	}
	if resp.Models[0].Pooled.Summary.PromptComputedTokens != 0 {
		t.Fatalf("the slot in progress was counted")
	}
	resp = ts.Snapshot(time.Minute, seriesEpoch.Add(30*time.Second))
	if got := resp.Models[0].Pooled.Summary.PromptComputedTokens; got != 10 {
		t.Fatalf("computed = %v once the slot completed, want 10", got)
	}
}

func TestTokenSeriesForgetsSlotsOlderThanAnHour(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch)
	ts.Observe("m", 0, TokenCounters{PromptTokens: 500}, seriesEpoch.Add(time.Second))
	// A lap of the ring later, the same ring index belongs to a new slot.
	later := seriesEpoch.Add(SeriesSpan + time.Second)
	ts.Observe("m", 0, TokenCounters{PromptTokens: 500}, later.Add(-500*time.Millisecond))
	ts.Observe("m", 0, TokenCounters{PromptTokens: 600}, later)

	resp := ts.Snapshot(3*time.Hour, later.Add(10*time.Second))
	if len(resp.Models[0].Pooled.Points) != 360 {
		t.Fatalf("points = %d, want the window capped at 360 slots of 10 s", len(resp.Models[0].Pooled.Points))
	}
	if got := resp.Models[0].Pooled.Summary.PromptComputedTokens; got != 100 {
		t.Fatalf("computed over the hour = %v, want 100 (the 500 fell out of the window)", got)
	}
}

func lastPoint(tb testing.TB, s adminapi.SeriesStats) adminapi.StatsPoint {
	tb.Helper()
	if len(s.Points) == 0 {
		tb.Fatal("series has no points")
	}
	p := s.Points[len(s.Points)-1]
	for _, v := range []float64{p.PromptCachedPerSec, p.PromptComputedPerSec, p.CompletionPerSec} {
		if math.IsNaN(v) || v < 0 {
			tb.Fatalf("point %+v has a negative or NaN rate", p)
		}
	}
	return p
}

func TestTokenSeriesSkipsFailedScrapes(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.ObserveReplica("m", 0, placement.ReplicaMetrics{Healthy: true, PromptTokens: 1000}, seriesEpoch)
	// A failed scrape reads as zeros; it must not look like a restart.
	ts.ObserveReplica("m", 0, placement.ReplicaMetrics{}, seriesEpoch.Add(time.Second))
	ts.ObserveReplica("m", 0, placement.ReplicaMetrics{Healthy: true, PromptTokens: 1100}, seriesEpoch.Add(2*time.Second))
	s := ts.Snapshot(time.Hour, seriesEpoch.Add(10*time.Second)).Models[0].Pooled.Summary
	if s.PromptComputedTokens != 100 {
		t.Fatalf("computed = %v, want 100 (the failed scrape skipped)", s.PromptComputedTokens)
	}
}

func TestTokenSeriesSetStepChangesResolution(t *testing.T) {
	ts := NewTokenSeries(0)
	if ts.Step() != DefaultSeriesStep {
		t.Fatalf("default step = %v, want %v", ts.Step(), DefaultSeriesStep)
	}
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch)
	ts.SetStep(time.Second)
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch)
	ts.Observe("m", 0, TokenCounters{PromptTokens: 5}, seriesEpoch.Add(900*time.Millisecond))
	resp := ts.Snapshot(time.Minute, seriesEpoch.Add(time.Second))
	if resp.StepSeconds != 1 || len(resp.Models[0].Pooled.Points) != 60 {
		t.Fatalf("step %v s, %d points; want 1 s and 60", resp.StepSeconds, len(resp.Models[0].Pooled.Points))
	}
	if got := lastPoint(t, resp.Models[0].Pooled).PromptComputedPerSec; got != 5 {
		t.Fatalf("computed = %v/s, want 5", got)
	}
}

func TestTokenSeriesSpreadsALongGapOverItsSlots(t *testing.T) {
	ts := NewTokenSeries(10 * time.Second)
	ts.Observe("m", 0, TokenCounters{}, seriesEpoch)
	// Scrapes failed for 40 s: the next good one carries 40 s of tokens.
	ts.Observe("m", 0, TokenCounters{PromptTokens: 4000}, seriesEpoch.Add(40*time.Second))
	pts := ts.Snapshot(time.Minute, seriesEpoch.Add(50*time.Second)).Models[0].Pooled.Points
	var got []float64
	for _, p := range pts {
		got = append(got, p.PromptComputedPerSec)
	}
	// Slots -10-0 s, 0-10 s, ..., 40-50 s: 1,000 tokens in each of the four 10 s of the gap.
	want := []float64{0, 100, 100, 100, 100, 0}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("computed rates = %v, want %v", got, want)
		}
	}
}
