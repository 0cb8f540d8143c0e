package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

func mustProfile(tb testing.TB, name string) sim.Profile {
	tb.Helper()
	p, err := sim.LookupProfile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func mustArms(tb testing.TB, list string) []Arm {
	tb.Helper()
	arms, err := ParseArms(list)
	if err != nil {
		tb.Fatal(err)
	}
	return arms
}

func TestIncrementalPromptEqualsFullRender(t *testing.T) {
	w := NewWorkload(5)
	c := NewConversation(w.Session(0))
	var prev []uint32
	for !c.Done() {
		msgs := c.Next()
		got := nextPrompt(w.System, prev, msgs)
		if want := sim.RenderPrompt(w.System, msgs); !slices.Equal(got, want) {
			t.Fatalf("turn %d: incremental prompt differs from the full render (%d vs %d tokens)", c.Turn, len(got), len(want))
		}
		prev = got
		c.Reply("the code and test file func ")
	}
}

func TestVirtualAffinityOnBeatsOffAtFourSessions(t *testing.T) {
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(4),
		Duration: 60 * time.Second, Arms: mustArms(t, "off,on"), Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	off, _ := rep.Find(4, ArmOff)
	on, _ := rep.Find(4, ArmOn)
	t.Logf("hit rate off %.3f on %.3f (ideal %.3f); requests %d/%d", off.HitRate, on.HitRate, rep.WorkloadIdeal, off.Requests, on.Requests)
	if off.Requests == 0 || on.Requests == 0 {
		t.Fatalf("no requests answered: off %d on %d", off.Requests, on.Requests)
	}
	if !(on.HitRate > off.HitRate) {
		t.Fatalf("on-arm hit rate %.3f does not beat off %.3f", on.HitRate, off.HitRate)
	}
	if on.Stayed < 0.99 {
		t.Fatalf("sticky arm kept only %.2f of requests on their session's replica", on.Stayed)
	}
	if off.Failed() || on.Failed() {
		t.Fatalf("failures: %+v %+v", off.Notes, on.Notes)
	}
}

func TestVirtualRunIsDeterministic(t *testing.T) {
	cfg := VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: Sessions(3),
		Duration: 40 * time.Second, Arms: mustArms(t, "round-robin,random"), Seed: 7, FreshReplicas: true,
	}
	a, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Results {
		x, y := a.Results[i], b.Results[i]
		if x.Requests != y.Requests || !sameNum(x.HitRate, y.HitRate) || !sameNum(x.TTFTP50, y.TTFTP50) {
			t.Fatalf("run %d differs: %+v vs %+v", i, x, y)
		}
	}
}

func sameNum(a, b Num) bool { return a == b || (a != a && b != b) }

// A round robin over four replicas keeps a quarter of a session's turns on
// its last replica by chance. Sessions started together with equal turn
// times would keep their order round after round and stay far more often
// (61-64% before the workload had tool time and staggered starts).
func TestVirtualRoundRobinDoesNotAliasWithSessions(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rep, err := RunVirtual(context.Background(), VirtualConfig{
			Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(4, 8),
			Duration: 3 * time.Minute, Arms: mustArms(t, "round-robin"), Seed: seed,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{4, 8} {
			r, _ := rep.Find(n, rep.Arms[0])
			t.Logf("seed %d, %d sessions: stayed %.2f over %d requests", seed, n, r.Stayed, r.Requests)
			if r.Stayed > 0.5 {
				t.Fatalf("seed %d, %d sessions: round robin kept %.2f of later requests on the previous replica", seed, n, r.Stayed)
			}
		}
	}
}
