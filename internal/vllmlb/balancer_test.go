package vllmlb

import (
	"testing"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0).UTC()

func TestOneAPIServerWithoutStatsIsRoundRobin(t *testing.T) {
	b := NewWithServers(4, 1, None, 1)
	b.Observe(epoch, []int{9, 0, 0, 0}, []int{9, 0, 0, 0}) // the engines send nothing: ignored
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

func TestEachAPIServerRoundRobinsOnItsOwn(t *testing.T) {
	// vLLM's default: as many API servers as ranks, each request meeting
	// one at random. Each server's own picks cycle through the ranks from
	// its start index (rank·i/N), whatever the others did, and its bump is
	// the number of servers.
	b := New(4, None, 7)
	if b.Servers() != 4 {
		t.Fatalf("%d API servers, want 4 (one a rank)", b.Servers())
	}
	for i, fe := range b.servers {
		if fe.start != i {
			t.Fatalf("server %d starts at %d, want %d", i, fe.start, i)
		}
	}
	last := map[*frontend]int{}
	perRank := map[int]int{}
	for k := range 400 {
		before := map[*frontend]int{}
		for _, fe := range b.servers {
			before[fe] = fe.start
		}
		r := b.Pick(epoch.Add(time.Duration(k)*time.Millisecond), nil)
		perRank[r]++
		var moved *frontend
		for _, fe := range b.servers {
			if fe.start != before[fe] {
				moved = fe
			}
		}
		if moved == nil {
			t.Fatal("no API server's start moved")
		}
		if prev, ok := last[moved]; ok && r != (prev+1)%4 {
			t.Fatalf("pick %d: a server went from rank %d to %d, not the next", k, prev, r)
		}
		last[moved] = r
		if moved.waiting[r] < 4 {
			t.Fatalf("the chosen rank's waiting was bumped to %d, want at least 4 (the server count)", moved.waiting[r])
		}
	}
	for r := range 4 {
		if perRank[r] < 80 || perRank[r] > 120 {
			t.Fatalf("rank %d got %d of 400 requests, want about 100 (%v)", r, perRank[r], perRank)
		}
	}
}

func TestWithoutStatsTheCoordinatorsZerosWipeTheBumps(t *testing.T) {
	b := NewWithServers(2, 1, None, 1)
	b.Pick(epoch, nil)
	if w, _ := b.Counts(); w[0]+w[1] != 1 {
		t.Fatalf("counts after one pick: %v", w)
	}
	b.Pick(epoch.Add(ZeroRepublish+time.Millisecond), nil) // the publish of zeros came first
	if w, _ := b.Counts(); w[0]+w[1] != 1 {
		t.Fatalf("counts after the coordinator's zeros and one pick: %v, want a single bump", w)
	}
}

func TestBalancerPicksLowestWaitingTimesFourPlusRunning(t *testing.T) {
	b := NewWithServers(3, 1, Fresh, 1)
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
	b := New(2, Stale, 1)
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
