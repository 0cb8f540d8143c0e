package bench

import (
	"math"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// within5 says whether got is within 5% of want.
func within5(got, want float64) bool { return math.Abs(got-want) <= 0.05*want }

func TestGeneratorTokenCountsMatchSpecWithinFivePercent(t *testing.T) {
	w := NewWorkload(1)
	if n := sim.TokenCount(w.System); !within5(float64(n), SystemTokens) {
		t.Errorf("system prompt: %d tokens, want about %d", n, SystemTokens)
	}
	for i := range 200 {
		s := w.Session(i)
		if len(s.Users) != TurnsPerSession {
			t.Fatalf("session %d: %d turns, want %d", i, len(s.Users), TurnsPerSession)
		}
		if n := sim.TokenCount(s.Users[0]); n < FirstUserMin*95/100 || n > FirstUserMax*105/100 {
			t.Errorf("session %d first message: %d tokens, want 7,200-7,500 (±5%%)", i, n)
		}
		for k, u := range s.Users[1:] {
			if n := sim.TokenCount(u); !within5(float64(n), FollowUpTokens) {
				t.Errorf("session %d turn %d: %d new tokens, want about %d", i, k+1, n, FollowUpTokens)
			}
		}
		// the reference's harness: the next turn as soon as the last ended
		for k, p := range s.Pauses {
			if p < PauseMin || p >= PauseMax {
				t.Errorf("session %d pause %d = %v, want tens of ms", i, k, p)
			}
		}
		for k, n := range s.MaxTokens {
			if n != MaxOutputTokens {
				t.Errorf("session %d turn %d: max_tokens %d, want %d", i, k, n, MaxOutputTokens)
			}
		}
	}
	// the big shape's agents run tools between turns: log-uniform tool
	// time over 0.1-20 s, mean (20-0.1)/ln(200) = 3.76 s
	big := NewWorkloadShape(1, BigShape)
	var tools time.Duration
	later := 0
	for i := range 200 {
		s := big.Session(i)
		for k, p := range s.Pauses[1:] {
			if p < PauseMin+ToolPauseMin {
				t.Errorf("big session %d pause %d = %v, want tool time", i, k+1, p)
			}
			tools += p - PauseMin
			later++
		}
		for k, n := range s.MaxTokens {
			if n < MinOutputTokens || n > MaxOutputTokens {
				t.Errorf("big session %d turn %d: max_tokens %d, want %d-%d", i, k, n, MinOutputTokens, MaxOutputTokens)
			}
		}
	}
	if mean := tools / time.Duration(later); mean < 3400*time.Millisecond || mean > 4100*time.Millisecond {
		t.Errorf("mean tool time %v, want about 3.8 s", mean)
	}
}

func TestGeneratorRendersPromptsOfSpecSize(t *testing.T) {
	w := NewWorkload(3)
	c := NewConversation(w.Session(0))
	first := len(sim.RenderPrompt(w.System, c.Next()))
	// system 3,500 + first message 7,200-7,500, plus a few role markers
	if first < (SystemTokens+FirstUserMin)*95/100 || first > (SystemTokens+FirstUserMax)*105/100 {
		t.Fatalf("first prompt %d tokens", first)
	}
	prev := first
	c.Reply(fillerReply(MaxOutputTokens))
	for !c.Done() {
		p := len(sim.RenderPrompt(w.System, c.Next()))
		if added := p - prev - MaxOutputTokens; !within5(float64(added), FollowUpTokens+5) {
			t.Errorf("turn %d added %d new tokens, want about %d", c.Turn, added, FollowUpTokens)
		}
		prev = p
		c.Reply(fillerReply(MaxOutputTokens))
	}
}

func TestSameSeedGivesSameSessionsInAnyOrder(t *testing.T) {
	a, b := NewWorkload(42), NewWorkload(42)
	if a.System != b.System {
		t.Fatal("system prompts differ for one seed")
	}
	late := b.Session(7) // asking out of order must not change anything
	for i := range 10 {
		if !reflect.DeepEqual(a.Session(i), b.Session(i)) {
			t.Fatalf("session %d differs for the same seed", i)
		}
	}
	if !reflect.DeepEqual(late, a.Session(7)) {
		t.Fatal("session 7 depends on the order it was drawn in")
	}
	if reflect.DeepEqual(a.Session(0).Users, NewWorkload(43).Session(0).Users) {
		t.Fatal("different seeds give the same session")
	}
}

func TestSessionsHaveUniqueUUIDsAndPrefixes(t *testing.T) {
	w := NewWorkload(9)
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	firstBlock := map[uint32]bool{}
	for i := range 100 {
		s := w.Session(i)
		if !re.MatchString(s.ID) {
			t.Fatalf("session id %q is not a v4 UUID", s.ID)
		}
		if seen[s.ID] {
			t.Fatalf("duplicate session id %s", s.ID)
		}
		seen[s.ID] = true
		tok := sim.Tokenize(s.Users[0])[2] // inside the id
		firstBlock[tok] = true
	}
	if len(firstBlock) < 90 {
		t.Fatalf("first messages share their leading tokens too often: %d distinct of 100", len(firstBlock))
	}
}

func TestIdealHitRateCountsEachTokenOncePerSession(t *testing.T) {
	// Hand-computed: two turns of one session. Turn 1: prompt 100 of which
	// the system section is 40; turn 2: prompt 150 after 100 + a reply of 20.
	// Computed: 60 + 30, plus the system 40 once on each of 2 replicas = 170
	// of 250 prompt tokens: ideal = 1 - 170/250 = 0.32.
	turns := []TurnTokens{{Prompt: 100, Reused: 40}, {Prompt: 150, Reused: 120}}
	if got := IdealHitRate(turns, 40, 2); math.Abs(got-0.32) > 1e-12 {
		t.Fatalf("ideal = %v, want 0.32", got)
	}
	if got := IdealHitRate(nil, 40, 2); got != 0 {
		t.Fatalf("ideal of nothing = %v", got)
	}
	// The workload's own ideal: most of every prompt is history.
	if got := NewWorkload(1).IdealHitRate(20, 0); got < 0.80 || got > 0.90 {
		t.Fatalf("workload ideal = %.3f, want about 0.85", got)
	}
}

func TestVariantsShareShapeButNotText(t *testing.T) {
	w := NewWorkload(11)
	for i := range 20 {
		a, b := w.SessionVariant(i, 0), w.SessionVariant(i, 1)
		if a.ID == b.ID || a.Users[0] == b.Users[0] {
			t.Fatalf("session %d: variants share their text", i)
		}
		if !reflect.DeepEqual(a.Pauses, b.Pauses) {
			t.Fatalf("session %d: variants differ in pauses", i)
		}
		for k := range a.Users {
			if len(a.Users[k]) != len(b.Users[k]) {
				t.Fatalf("session %d turn %d: variants differ in size", i, k)
			}
		}
	}
}
