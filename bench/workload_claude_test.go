package bench

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

func TestClaudeCodeGeneratesThePublishedDistributions(t *testing.T) {
	r := NewWorkloadShape(1, ClaudeCodeShape).Describe(2000, 262_144)
	var b strings.Builder
	r.writeTable(&b)
	t.Log("\n" + b.String())
	within := func(name string, i int) {
		t.Helper()
		for _, q := range r.Quantities {
			if q.Name != name {
				continue
			}
			g, p := float64(q.Generated[i]), float64(q.Published[i])
			if math.Abs(g-p)/p > 0.10 {
				t.Errorf("%s: generated p%d %.0f, published %.0f: more than 10%% off", name, []int{50, 90, 99}[i], g, p)
			}
			return
		}
		t.Fatalf("no quantity %q", name)
	}
	for _, name := range []string{"input growth over the previous turn", "gap between turns, s", "turns a session", "subagents a group"} {
		within(name, 0)
		within(name, 1)
	}
	within("output tokens", 0)
	within("gap between turns, s", 2)
	if s := float64(r.AgentShare); math.Abs(s-CCAgentRequestShare) > 0.05 {
		t.Errorf("subagent requests %.3f of all, published %.3f", s, CCAgentRequestShare)
	}
	if s := float64(r.ResetShare); math.Abs(s-CCResetShare) > 0.005 {
		t.Errorf("prefix resets %.4f of turns, published %.3f", s, CCResetShare)
	}
}

// seedWithEarlyGroup is a seed whose session 0 launches a group of
// subagents within its first turns (a group follows about one turn in 200).
func seedWithEarlyGroup(tb testing.TB) uint64 {
	for seed := uint64(1); seed < 10_000; seed++ {
		p := ccSessionPlan(seed, 0, 262_144)
		for k := range 6 {
			if g, ok := p.groups[k]; ok && len(g) <= 12 {
				return seed
			}
		}
	}
	tb.Fatal("no seed launches a group early")
	return 0
}

func TestClaudeCodeRefusesASmallContext(t *testing.T) {
	_, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 1, Steps: Sessions(1), Duration: time.Minute,
		Arms: mustArms(t, "sticky"), Workload: ClaudeCodeShape,
	})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "65536") {
		t.Fatalf("got %v, want the context refused", err)
	}
}

func TestClaudeCodeLoadIsSizedFromTheCache(t *testing.T) {
	w := NewWorkloadShape(1, ClaudeCodeShape)
	p := mustProfile(t, "h200-qwen3-4b")
	one, two := EstimateLoad(w, p, 8, p.ContextLimit(), 1), EstimateLoad(w, p, 8, p.ContextLimit(), 2)
	t.Logf("1x: %+v", one)
	if !(one.Sessions > 5 && one.MeanContext > 25_000 && one.MeanContext < 262_144 && one.PerMin > 0) {
		t.Fatalf("1x sized as %+v", one)
	}
	if math.Abs(one.Sessions*one.MeanContext-one.CacheTokens) > 1 || !(two.Sessions > one.Sessions) {
		t.Fatalf("1x: %.1f sessions of %.0f tokens for %.0f of cache; 2x: %.1f", one.Sessions, one.MeanContext, one.CacheTokens, two.Sessions)
	}
}

// TestClaudeCodeParentWaitsForItsSubagents: in every window, no
// main-agent request of a session is sent while one of its subagents is
// at work, and a group's subagents start together.
func TestClaudeCodeParentWaitsForItsSubagents(t *testing.T) {
	var rec TraceRecorder
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "h200-qwen3-4b"), Replicas: 2, Steps: Sessions(3), Duration: 20 * time.Minute,
		Arms: mustArms(t, "sticky"), Seed: seedWithEarlyGroup(t), Workload: ClaudeCodeShape, Trace: &rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Results[0]
	if x.Requests == 0 || x.Failed() || x.ClaudeCode == nil {
		t.Fatalf("%d requests, %v", x.Requests, x.Notes)
	}
	type span struct{ first, last time.Time }
	agents := map[string]map[string]*span{} // session → agent → its requests' span
	var mains []TraceRequest
	for _, q := range rec.Windows[0].Requests {
		session, agent, ok := strings.Cut(q.Session, "/")
		if !ok {
			mains = append(mains, q)
			continue
		}
		if agents[session] == nil {
			agents[session] = map[string]*span{}
		}
		s := agents[session][agent]
		if s == nil {
			s = &span{first: q.Sent}
			agents[session][agent] = s
		}
		s.last = q.Done
	}
	if len(agents) == 0 {
		t.Fatal("no subagent ran")
	}
	for _, m := range mains {
		for id, s := range agents[m.Session] {
			if m.Sent.After(s.first) && m.Sent.Before(s.last) {
				t.Fatalf("session %s sent a main request at %v while subagent %s ran (%v to %v)", m.Session, m.Sent, id, s.first, s.last)
			}
		}
	}
	for session, group := range agents {
		var first, last time.Time
		for _, s := range group {
			if first.IsZero() || s.first.Before(first) {
				first = s.first
			}
			if s.first.After(last) {
				last = s.first
			}
		}
		if last.Sub(first) > time.Second && len(group) < 100 {
			// a session may run two groups in the window; each starts together
			t.Logf("session %s: subagents started over %v (more than one group)", session, last.Sub(first))
		}
	}
}

func mustH200Sim(tb testing.TB, speed float64) *sim.Servers {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := sim.Serve(ctx, sim.ServerConfig{Replicas: 1, Listen: "127.0.0.1:0", Shape: sim.ShapePorts,
		Profile: mustProfile(tb, "h200-qwen3-4b"), Speed: speed, Model: "qwen3-4b"})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); s.Close() })
	return s
}

// TestClaudeCodeSubagentsCarryTheParentsSessionAndTheirOwnAgentID drives
// a session by hand, answering every request at once: the main agent's
// requests carry its session id alone, a subagent's the same session id
// and its own 16-hex-digit agent id, and the parent sends nothing while
// its group runs; without session headers, neither is sent.
func TestClaudeCodeSubagentsCarryTheParentsSessionAndTheirOwnAgentID(t *testing.T) {
	w := NewWorkloadShape(seedWithEarlyGroup(t), ClaudeCodeShape)
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, noHeader := range []bool{false, true} {
		s := newCCSession(w, 0, 0, 262_144, noHeader, false, &ccStats{})
		queue := s.Start(0)
		running := map[string]bool{} // subagents of the group in flight
		agents, groups, mains := map[string]bool{}, 0, 0
		for now := time.Duration(0); len(queue) > 0 && mains < 40; now += time.Second {
			f := queue[0]
			queue = queue[1:]
			switch {
			case noHeader && (f.Session != "" || f.Agent != ""):
				t.Fatalf("headers %q, %q sent without session headers", f.Session, f.Agent)
			case noHeader:
			case f.Session != s.ID():
				t.Fatalf("request with session %q, want %q", f.Session, s.ID())
			case f.Agent == "":
				mains++
				if len(running) > 0 {
					t.Fatalf("main-agent request while %d subagents run", len(running))
				}
			case !hex16.MatchString(f.Agent):
				t.Fatalf("agent id %q: want 16 hex digits", f.Agent)
			default:
				if len(running) == 0 && !agents[f.Agent] {
					groups++
				}
				running[f.Agent], agents[f.Agent] = true, true
			}
			next := s.Answered(&f, flowAnswer{Text: fillerReply(f.MaxTokens), Prompt: promptEstimate(&f), Output: f.MaxTokens}, now)
			for _, c := range s.Ended() {
				if _, agent, ok := strings.Cut(c, "/"); ok {
					delete(running, agent)
				}
			}
			queue = append(queue, next...)
		}
		t.Logf("session header %v: %d main-agent requests, %d subagents in %d groups", !noHeader, mains, len(agents), groups)
		if !noHeader && (len(agents) == 0 || groups == 0) {
			t.Fatal("no subagent ran")
		}
	}
}

func TestStreamTurnSendsTheConversationsHeaders(t *testing.T) {
	var got [][2]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, [2]string{r.Header.Get(SessionHeader), r.Header.Get(AgentHeader)})
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	for _, ids := range []turnHeaders{{}, {Session: "s"}, {Session: "s", Agent: "0123456789abcdef"}} {
		_, _ = streamTurn(context.Background(), srv.Client(), APIAnthropic, srv.URL, "m", ids, "", []sim.Message{{Role: "user", Content: "hi"}}, 1)
	}
	if want := [][2]string{{"", ""}, {"s", ""}, {"s", "0123456789abcdef"}}; !slices.Equal(got, want) {
		t.Fatalf("headers %q, want %q", got, want)
	}
}

func TestRealClaudeCodeAgainstASimulatedReplica(t *testing.T) {
	s := mustH200Sim(t, 100)
	rep, err := RunReal(context.Background(), RealConfig{
		// 10 simulated minutes (6 s of wall time): the replica runs on
		// wall time, and at 5 a loaded machine could end the window
		// before the early group of subagents began (share 0).
		Target: s.URLs()[0], API: APIAnthropic, ReplicaMetrics: s.URLs(), Steps: Sessions(3), Duration: 10 * time.Minute,
		Arms: mustArms(t, "on"), Seed: seedWithEarlyGroup(t), Speed: 100, Workload: ClaudeCodeShape,
		RequestTimeout: time.Hour, // a loaded machine falls behind the replica's speed on bodies of 100K tokens
	})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Results[0]
	t.Logf("%d requests, hit %.3f, subagent share %.2f", x.Requests, x.HitRate, x.ClaudeCode.AgentShare)
	if x.Requests == 0 || x.Failed() || !(x.ClaudeCode.AgentShare > 0) || !(x.HitRate > 0.5) {
		t.Fatalf("%d requests, hit %.3f, %+v: %v", x.Requests, x.HitRate, x.ClaudeCode, x.Notes)
	}
}
