package least

import "testing"

func TestByPicksTheLowestCostAmongEligible(t *testing.T) {
	costs := []float64{5, 1, 3, 1}
	start := 0
	got := By(&start, len(costs), func(i int) (float64, bool) { return costs[i], i != 1 })
	if got != 3 {
		t.Fatalf("picked %d, want 3 (1 is not eligible, 3 costs 1)", got)
	}
	if start != 1 {
		t.Fatalf("start %d after one call, want 1", start)
	}
}

func TestByTiesGoToTheFirstScannedAndRotate(t *testing.T) {
	start := 0
	seen := map[int]int{}
	for range 8 {
		seen[By(&start, 4, func(int) (int, bool) { return 7, true })]++
	}
	for i := range 4 {
		if seen[i] != 2 {
			t.Fatalf("index %d won %d of 8 ties, want 2 (%v)", i, seen[i], seen)
		}
	}
}

func TestByWithNothingEligibleIsMinusOne(t *testing.T) {
	start := 2
	if got := By(&start, 3, func(int) (int, bool) { return 0, false }); got != -1 {
		t.Fatalf("picked %d, want -1", got)
	}
	if start != 0 {
		t.Fatalf("start %d, want it moved on to 0", start)
	}
	zero := 0
	if got := By(&zero, 0, func(int) (int, bool) { return 0, true }); got != -1 || zero != 0 {
		t.Fatalf("empty scan: %d, start %d", got, zero)
	}
}
