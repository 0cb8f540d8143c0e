package placement

import (
	"testing"
	"time"
)

func TestHitRateIsDeltaOverWindowAndSurvivesCounterReset(t *testing.T) {
	w := hitRateWindow{window: 10 * time.Second}
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	w.add(at(0), 1000, 900) // history before the window: 90%
	w.add(at(5), 1100, 950)
	w.add(at(10), 1200, 1000)
	if r, ok := w.value(); !ok || r != 0.5 {
		t.Fatalf("rate %v %v, want 0.5 over the window", r, ok)
	}
	w.add(at(20), 1400, 1000) // only the last 10 s: 0 hits of 200
	if r, _ := w.value(); r != 0 {
		t.Fatalf("rate %v, want 0", r)
	}
	w.add(at(21), 100, 80) // replica restarted: a reset, not a negative rate
	if r, _ := w.value(); r < 0 {
		t.Fatalf("negative rate %v after reset", r)
	}
	w.add(at(22), 200, 170)
	if r, _ := w.value(); r != 0.9 {
		t.Fatalf("rate after reset %v, want 0.9", r)
	}
}
