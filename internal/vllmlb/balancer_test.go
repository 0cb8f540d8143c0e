package vllmlb

import (
	"testing"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0).UTC()

func TestBalancerWithoutStatsIsRoundRobin(t *testing.T) {
	b := New(4, None)
	b.Observe(epoch, []int{9, 0, 0, 0}, []int{9, 0, 0, 0}) // ignored
	seen := map[int]int{}
	for i := range 8 {
		seen[b.Pick(epoch.Add(time.Duration(i)*time.Second), nil)]++
	}
	for r := range 4 {
		if seen[r] != 2 {
			t.Fatalf("rank %d picked %d times in 8, want 2 (%v)", r, seen[r], seen)
		}
	}
}

func TestBalancerPicksLowestWaitingTimesFourPlusRunning(t *testing.T) {
	b := New(3, Fresh)
	b.Observe(epoch, []int{1, 0, 0}, []int{0, 5, 3})
	if r := b.Pick(epoch, nil); r != 2 {
		t.Fatalf("picked %d, want 2 (score 3 < 4 < 5)", r)
	}
	// local bump: rank 2 now scores 7, rank 0 scores 4
	if r := b.Pick(epoch, nil); r != 0 {
		t.Fatalf("picked %d after bump, want 0", r)
	}
	// a publish within 100 ms is not applied
	b.Observe(epoch.Add(50*time.Millisecond), []int{0, 0, 0}, []int{0, 0, 0})
	if w, _ := b.Counts(); w[2] != 1 {
		t.Fatalf("publish applied before the interval: waiting %v", w)
	}
	if r := b.Pick(epoch, func(r int) bool { return r == 1 }); r != 1 {
		t.Fatalf("eligible filter ignored: %d", r)
	}
}

func TestStaleBalancerAppliesCountsASecondLate(t *testing.T) {
	b := New(2, Stale)
	b.Observe(epoch, []int{5, 0}, []int{0, 0})
	if w, _ := b.Counts(); w[0] != 0 {
		t.Fatal("stale stats applied at once")
	}
	b.Observe(epoch.Add(StaleLag), []int{0, 0}, []int{0, 0})
	if w, _ := b.Counts(); w[0] != 5 {
		t.Fatalf("stale stats not applied after the lag: %v", w)
	}
}

func TestParseStatsMode(t *testing.T) {
	for _, s := range []string{"fresh", "stale", "none"} {
		m, err := ParseStatsMode(s)
		if err != nil || m.String() != s {
			t.Fatalf("%s: %v %v", s, m, err)
		}
	}
	if _, err := ParseStatsMode("hot"); err == nil {
		t.Fatal("accepted hot")
	}
}
