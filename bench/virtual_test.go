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

// The reference's sessions send their turns back to back, 256 tokens each,
// so a plain round robin over four replicas sends four sessions back to
// the replica their last turn used, round after round (accidental
// stickiness). vLLM's own balancer does not: each request meets one of its
// four API servers at random (a new connection each), and each of those
// round-robins on its own, so a session's next turn lands on its last
// replica about a quarter of the time, as by chance.
func TestVirtualVLLMBalancerDoesNotAliasWithSessions(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		p := mustProfile(t, "a4000-qwen3-4b")
		rep, err := RunVirtual(context.Background(), VirtualConfig{
			Profile: p, Replicas: 4, Steps: Sessions(4, 8), LBStats: p.LBStats(),
			Duration: 3 * time.Minute, Arms: mustArms(t, "vllm-lb,round-robin"), Seed: seed, FreshReplicas: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{4, 8} {
			lb, _ := rep.Find(n, "vllm-lb")
			rr, _ := rep.Find(n, "round-robin")
			t.Logf("seed %d, %d sessions: stayed %.2f (vLLM's balancer), %.2f (round robin)", seed, n, lb.Stayed, rr.Stayed)
			if lb.Stayed > 0.5 {
				t.Fatalf("seed %d, %d sessions: vLLM's balancer kept %.2f of later requests on the previous replica", seed, n, lb.Stayed)
			}
		}
		if rr, _ := rep.Find(4, "round-robin"); rr.Stayed < 0.9 {
			t.Fatalf("seed %d: round robin of four back-to-back sessions kept only %.2f on their replica", seed, rr.Stayed)
		}
	}
}
