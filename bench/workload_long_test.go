package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

func mustLong(tb testing.TB, seed uint64) *Workload {
	tb.Helper()
	shape, err := ParseWorkload("long")
	if err != nil {
		tb.Fatal(err)
	}
	return NewWorkloadShape(seed, shape)
}

func TestLongSessionsHaveTheirSizes(t *testing.T) {
	w := mustLong(t, 1)
	var tools []float64
	for i := range 300 {
		s := w.Session(i)
		if n := sim.TokenCount(s.Users[0]); n < LongFirstMin || n > LongFirstMax {
			t.Fatalf("session %d: first message of %d tokens, want %d-%d", i, n, LongFirstMin, LongFirstMax)
		}
		for k, u := range s.Users[1:] {
			n := sim.TokenCount(u)
			if n < ToolResultMin || n > ToolResultMax {
				t.Fatalf("session %d turn %d: tool result of %d tokens, want %d-%d", i, k+1, n, ToolResultMin, ToolResultMax)
			}
			tools = append(tools, float64(n))
		}
		for k := range s.Users {
			if s.MaxTokens[k] < MinOutputTokens || s.MaxTokens[k] > MaxOutputTokens ||
				s.Summaries[k] < SummaryMin || s.Summaries[k] > SummaryMax {
				t.Fatalf("session %d turn %d: max_tokens %d, summary %d", i, k, s.MaxTokens[k], s.Summaries[k])
			}
			lo, hi := ToolPauseMin, ToolPauseMax
			if k == 0 {
				lo, hi = PauseMin, PauseMax
			}
			if s.Pauses[k] < lo || s.Pauses[k] > hi {
				t.Fatalf("session %d turn %d: pause %v, want %v-%v", i, k, s.Pauses[k], lo, hi)
			}
		}
	}
	// Log-uniform on [200, 4000]: the median is their geometric mean.
	sort.Float64s(tools)
	if med, want := tools[len(tools)/2], math.Sqrt(ToolResultMin*ToolResultMax); math.Abs(med-want) > 0.1*want {
		t.Fatalf("median tool result %v tokens, want about %.0f (log-uniform)", med, want)
	}
}

func TestLongSessionsTurnsHaveAParetoTail(t *testing.T) {
	w := mustLong(t, 2)
	const n = 20000
	turns := make([]int, n)
	for i := range turns {
		turns[i] = len(w.plan(i).Users)
	}
	ge := func(k int) float64 { // share of sessions with at least k turns
		c := 0
		for _, t := range turns {
			if t >= k {
				c++
			}
		}
		return float64(c) / n
	}
	// P(turns ≥ t) = (4/t)^1.1 for t from 4 to 300; an exponential with the
	// same median (7.5 turns) would give 2.5% at 40 turns, not 8%.
	for _, k := range []int{4, 8, 16, 40, 100} {
		want := math.Pow(LongTurnsMin/float64(k), LongTurnsAlpha)
		if got := ge(k); math.Abs(got-want) > 0.1*want+0.002 {
			t.Errorf("P(turns ≥ %d) = %.4f, want %.4f", k, got, want)
		}
	}
	if got := ge(LongTurnsMax + 1); got != 0 {
		t.Errorf("%.4f of sessions have more than %d turns", got, LongTurnsMax)
	}
}

// playRendered plays a session through Conversation as the runners do,
// with replies of max_tokens, and returns each request's rendered prompt.
func playRendered(w *Workload, s *Session, limit int, each func(c *Conversation, req Request, prompt []uint32)) *Conversation {
	c := NewConversation(s)
	c.Limit = limit
	for !c.Done() {
		req := c.NextRequest()
		prompt := sim.RenderPrompt(w.System, req.Messages)
		each(c, req, prompt)
		// a reply of max_tokens that no other reply shares (4 bytes a token)
		reply := strings.Repeat(fmt.Sprintf("%04d", len(prompt)%10000), req.MaxTokens)
		c.Answer(reply, len(prompt), req.MaxTokens)
	}
	return c
}

func TestLongSessionsCompactNearTheContextAndStartOver(t *testing.T) {
	w := mustLong(t, 3)
	const limit = 32_768
	sys := w.SystemSectionTokens()
	compacted := 0
	for i := range 60 {
		s := w.Session(i)
		var prev []uint32
		prevMax := 0
		wasCompaction := false
		c := playRendered(w, s, limit, func(c *Conversation, req Request, prompt []uint32) {
			if len(prompt)+req.MaxTokens > limit {
				t.Fatalf("session %d: a request of %d+%d tokens exceeds the %d-token context", i, len(prompt), req.MaxTokens, limit)
			}
			shared := commonPrefix(prev, prompt)
			switch {
			case req.Compaction:
				// due: the turn it precedes would have passed 90% of the context
				next := len(prev) + prevMax + 4 + sim.TokenCount(s.Users[c.Turn]) + s.MaxTokens[c.Turn]
				if float64(next) <= CompactShare*limit {
					t.Fatalf("session %d: compacted before a turn of %d tokens, under %.0f%% of %d", i, next, 100*CompactShare, limit)
				}
				if shared < len(prev)-1 { // all but the generation marker, or all (it is the assistant's role)
					t.Fatalf("session %d: the compaction request does not extend the history", i)
				}
			case wasCompaction:
				// the summary replaced the history: only the system prompt
				// (and the summary's fixed introduction) is shared
				if shared > sys+2+sim.TokenCount(summaryIntro) || !req.Fresh {
					t.Fatalf("session %d: after compaction the prompt shares %d tokens (system %d), fresh %v", i, shared, sys, req.Fresh)
				}
				if len(prompt) > sys+SummaryMax+ToolResultMax+64 {
					t.Fatalf("session %d: the prompt after compaction has %d tokens", i, len(prompt))
				}
			case prev != nil:
				if shared < len(prev)-1 || req.Fresh {
					t.Fatalf("session %d: a later turn does not extend its history (%d of %d)", i, shared, len(prev))
				}
				// a turn that was sent was not due for compaction
				if float64(len(prompt)+req.MaxTokens) > CompactShare*limit+8 {
					t.Fatalf("session %d: a turn of %d tokens past %.0f%% of the context without compaction", i, len(prompt)+req.MaxTokens, 100*CompactShare)
				}
			}
			if wasCompaction && req.Compaction {
				t.Fatalf("session %d: two compactions in a row", i)
			}
			wasCompaction = req.Compaction
			prev, prevMax = prompt, req.MaxTokens
		})
		compacted += c.Compactions()
		if c.Compactions() > 0 && totalContext(s) < limit*CompactShare {
			t.Fatalf("session %d compacted though its whole history fits", i)
		}
	}
	if compacted == 0 {
		t.Fatal("no session of 60 compacted at a 32k context")
	}
	// Without a limit nothing compacts.
	if c := playRendered(w, w.Session(0), 0, func(*Conversation, Request, []uint32) {}); c.Compactions() != 0 {
		t.Fatal("compacted without a context limit")
	}
}

// totalContext is a session's history with every turn kept and replies of
// max_tokens (an upper bound on what it would ever hold).
func totalContext(s *Session) float64 {
	n := 0
	for k, u := range s.Users {
		n += sim.TokenCount(u) + s.MaxTokens[k] + 4
	}
	return float64(n + SystemTokens)
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestPlansPlayLikeTheRenderedConversation(t *testing.T) {
	for _, w := range []*Workload{NewWorkload(4), mustLong(t, 4)} {
		sys := w.SystemSectionTokens()
		for i := range 20 {
			var rendered []int
			playRendered(w, w.Session(i), 20_000, func(_ *Conversation, _ Request, prompt []uint32) { rendered = append(rendered, len(prompt)) })
			var planned []int
			w.plan(i).play(sys, 20_000, func(r playedRequest) { planned = append(planned, r.Prompt) })
			if !slices.Equal(rendered, planned) {
				t.Fatalf("%s session %d: plan prompts %v, rendered %v", w.Shape.Name, i, planned, rendered)
			}
		}
	}
}

func TestLongWorkloadIsDeterministicPerSeed(t *testing.T) {
	a, b := mustLong(t, 42), mustLong(t, 42)
	late := b.Session(9)
	for i := range 10 {
		if !reflect.DeepEqual(a.Session(i), b.Session(i)) {
			t.Fatalf("session %d differs for one seed", i)
		}
	}
	if !reflect.DeepEqual(late, a.Session(9)) {
		t.Fatal("session 9 depends on the order it was drawn in")
	}
	if reflect.DeepEqual(a.plan(0), mustLong(t, 43).plan(0)) {
		t.Fatal("different seeds give the same session")
	}
	x, y := a.SessionVariant(3, 0), a.SessionVariant(3, 1)
	if x.ID == y.ID || !reflect.DeepEqual(x.Pauses, y.Pauses) || len(x.Users) != len(y.Users) {
		t.Fatal("variants must share the shape, not the text")
	}
}

func TestArrivalsArePoissonAtTheirRate(t *testing.T) {
	s := Step{Arrivals: ArrivalsPoisson, PerMin: 6}
	times := arrivalTimes(7, s, 100*time.Minute)
	// 600 expected; a Poisson count's sd is its root (24.5): within 3 sd.
	if n := len(times); n < 600-75 || n > 600+75 {
		t.Fatalf("%d arrivals in 100 min at 6/min, want 600 ± 75", n)
	}
	var gaps []float64
	for i := 1; i < len(times); i++ {
		if times[i] < times[i-1] {
			t.Fatal("arrival times out of order")
		}
		gaps = append(gaps, (times[i] - times[i-1]).Seconds())
	}
	mean := Mean(gaps)
	var v float64
	for _, g := range gaps {
		v += (g - mean) * (g - mean)
	}
	// exponential gaps: the coefficient of variation is 1
	if cv := math.Sqrt(v/float64(len(gaps))) / mean; math.Abs(cv-1) > 0.15 {
		t.Fatalf("gaps' coefficient of variation %.2f, want about 1 (exponential)", cv)
	}
	if !slices.Equal(times, arrivalTimes(7, s, 100*time.Minute)) {
		t.Fatal("arrivals differ for one seed")
	}
	if slices.Equal(times, arrivalTimes(8, s, 100*time.Minute)) {
		t.Fatal("arrivals are the same for another seed")
	}
	if arrivalTimes(7, Step{Sessions: 4}, time.Hour) != nil {
		t.Fatal("a closed loop has arrivals")
	}
}

func TestParseStepsReadsCountsRatesAndLoads(t *testing.T) {
	cases := []struct {
		list, arrivals string
		want           []Step
	}{
		{"4,8", "closed", Sessions(4, 8)},
		{"1.5x, 2x", "", []Step{{CacheLoad: 1.5}, {CacheLoad: 2}}},
		{"3,0.5/s,30/h,2/min", "poisson", []Step{{Arrivals: "poisson", PerMin: 3}, {Arrivals: "poisson", PerMin: 30},
			{Arrivals: "poisson", PerMin: 0.5}, {Arrivals: "poisson", PerMin: 2}}},
		{"", "poisson:3/min", []Step{{Arrivals: "poisson", PerMin: 3}}},
		{"1.5x", "poisson", []Step{{Arrivals: "poisson", CacheLoad: 1.5}}},
	}
	for _, c := range cases {
		got, err := ParseSteps(c.list, c.arrivals)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseSteps(%q, %q) = %v, %v; want %v", c.list, c.arrivals, got, err, c.want)
		}
	}
	for _, bad := range [][2]string{{"0", ""}, {"x", ""}, {"-1x", ""}, {"2.5", "closed"}, {"3/day", "poisson"},
		{"4", "poisson:3/min"}, {"", "closed:3"}, {"4", "uniform"}, {"", ""}, {"0/min", "poisson"}} {
		if _, err := ParseSteps(bad[0], bad[1]); err == nil {
			t.Errorf("ParseSteps(%q, %q) accepted", bad[0], bad[1])
		}
	}
	for s, want := range map[Step]string{
		{Sessions: 24}: "24", {CacheLoad: 1.5, Sessions: 19}: "1.5x (19)", {Arrivals: "poisson", PerMin: 3.25}: "3.25/min",
		{Arrivals: "poisson", PerMin: 10.7, CacheLoad: 1.5}: "1.5x (10.7/min)", {CacheLoad: 2}: "2x",
	} {
		if s.String() != want {
			t.Errorf("%+v names itself %q, want %q", s, s.String(), want)
		}
	}
}

func TestLoadStepsHoldTheirLiveContext(t *testing.T) {
	// A closed loop sized for 1x and 2x of the cache holds about that
	// much live context, measured.
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: []Step{{CacheLoad: 1}, {CacheLoad: 2}},
		Duration: 3 * time.Minute, Arms: mustArms(t, "sticky"), FreshReplicas: true, Seed: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, load := range []float64{1, 2} {
		x := rep.Results[i]
		if math.Abs(float64(x.LiveContextX)-load) > 0.15*load {
			t.Errorf("load %vx (%d sessions): measured live context %.2fx", load, x.Sessions, x.LiveContextX)
		}
	}
	// 4 × 40,000 tokens of cache, sessions of 11-14k: 1x is 12-14 sessions.
	if n := rep.Results[0].Sessions; n < 12 || n > 14 {
		t.Errorf("1x sized to %d sessions", n)
	}
	if len(rep.StepNotes) != 2 {
		t.Errorf("the report does not say how the loads were sized: %v", rep.StepNotes)
	}
	// An open loop's rate keeps that many live sessions at the estimate's
	// speed: arrivals a minute × session length = sessions.
	w := NewWorkload(5)
	p := mustProfile(t, "a4000-qwen3-4b")
	est := EstimateLoad(w, p, 4, p.ContextLimit(), 1)
	if got := est.PerMin / 60 * est.SessionSeconds; math.Abs(got-est.Sessions) > 1e-9*est.Sessions {
		t.Errorf("arrivals %.3f/min × %.1fs = %.2f live sessions, want %.2f", est.PerMin, est.SessionSeconds, got, est.Sessions)
	}
	// Six turns of 192-256 tokens at 20-30 ms a decode step: a minute or two.
	if est.SessionSeconds < 30 || est.SessionSeconds > 200 {
		t.Errorf("a session lasts %.0fs by the estimate", est.SessionSeconds)
	}
}

func TestVirtualLongOpenLoopIsDeterministicAndCompacts(t *testing.T) {
	cfg := VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: []Step{{Arrivals: ArrivalsPoisson, PerMin: 2}},
		Duration: 10 * time.Minute, Warmup: 2 * time.Minute, Arms: mustArms(t, "sticky"), FreshReplicas: true, Seed: 6,
		Workload: LongShape, MaxContext: 16_384,
	}
	a, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	x := a.Results[0]
	ja, _ := json.Marshal(a.Results)
	jb, _ := json.Marshal(b.Results)
	if string(ja) != string(jb) {
		t.Fatalf("one seed, two results:\n%s\n%s", ja, jb)
	}
	if x.Requests == 0 || x.Failed() || x.Compactions == 0 || x.Completed == 0 {
		t.Fatalf("requests %d, errors %d, compactions %d, tasks done %d: %v", x.Requests, x.Errors, x.Compactions, x.Completed, x.Notes)
	}
	if !(x.TTFTFirstP50 > 0) || !(x.TaskP50 > 0) || !(x.LiveContextX > 0) {
		t.Fatalf("missing numbers: %+v", x.TaskStats)
	}
	cfg.MaxContext = 8192
	if _, err := RunVirtual(context.Background(), cfg); err == nil {
		t.Fatal("the long workload ran against an 8k context, too small to compact in")
	}
}
