package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// traceRow is a row of a generated trace.
type traceRow struct {
	ms            int64
	input, output int
	ids           []int64
}

func (r traceRow) line() string {
	ids := make([]string, len(r.ids))
	for i, id := range r.ids {
		ids[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf(`{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`,
		r.ms, r.input, r.output, strings.Join(ids, ", "))
}

// genTrace makes a trace shaped as Mooncake's: every row starts with the
// shared block 0; a conversation's next turn keeps its previous turn's
// ids but a partial last one, which comes back under a new id, and adds
// ids for the reply and the new message. It returns the trace's text and,
// for each row in arrival order, its conversation.
func genTrace(seed uint64, convs, maxTurns int, gap time.Duration, block int) (string, []int) {
	r := rand.New(rand.NewPCG(seed, 99))
	next := int64(1)
	var rows []traceRow
	var conv []int
	for c := range convs {
		at := int64(r.IntN(20_000))
		input := 2*block + 1 + r.IntN(5*block) // two whole blocks: a next turn shares more than block 0
		var ids []int64
		for t := range 1 + r.IntN(maxTurns) {
			n := (input + block - 1) / block
			if t == 0 {
				ids = []int64{0}
			} else if len(ids) > 0 && rows[len(rows)-1].input%block != 0 {
				ids = ids[:len(ids)-1] // the partial block is re-hashed
			}
			for len(ids) < n {
				ids = append(ids, next)
				next++
			}
			out := 16 + r.IntN(200)
			rows = append(rows, traceRow{ms: at, input: input, output: out, ids: slices.Clone(ids)})
			conv = append(conv, c)
			at += int64(gap/time.Millisecond) + int64(r.IntN(1000))
			input += out + 10 + r.IntN(2*block)
		}
	}
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rows[order[a]].ms < rows[order[b]].ms })
	var b strings.Builder
	convOf := make([]int, len(rows))
	for k, i := range order {
		b.WriteString(rows[i].line() + "\n")
		convOf[k] = conv[i]
	}
	return b.String(), convOf
}

func mustTrace(tb testing.TB, text string, block int) *Trace {
	tb.Helper()
	t, err := ReadTrace(strings.NewReader(text), block)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func TestReadTraceRefusesBadLinesNamingThem(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`
	cases := map[string]string{
		"not a JSON request":  good + "\n{\"timestamp\": 3,",
		"want timestamp":      good + "\n" + `{"input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`,
		"blocks of 512":       good + "\n" + `{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}`,
		"input_length 0":      good + "\n" + `{"timestamp": 1, "input_length": 0, "output_length": 5, "hash_ids": []}`,
		"output_length -1":    good + "\n" + `{"timestamp": 1, "input_length": 10, "output_length": -1, "hash_ids": [0]}`,
		"timestamp -5":        good + "\n" + `{"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [0]}`,
		"has no requests":     "\n\n",
		"positive number of ": "", // block 0, below
	}
	for want, text := range cases {
		block := 512
		if want == "positive number of " {
			block = 0
		}
		_, err := ReadTrace(strings.NewReader(text), block)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", text, err, want)
		}
		if strings.Count(text, "\n") == 1 && want != "has no requests" && !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v does not name line 2", text, err)
		}
	}
	tr := mustTrace(t, "\n"+good+"\n\n"+`{"timestamp": 0.5, "input_length": 10, "output_length": 0, "hash_ids": [0], "extra": 1}`+"\n", 512)
	if len(tr.Rows) != 2 || tr.Rows[0].Line != 2 || tr.Rows[1].At != 500*time.Microsecond {
		t.Fatalf("rows %+v", tr.Rows)
	}
}

func TestConversationsAreRebuiltFromHashChains(t *testing.T) {
	text := strings.Join([]string{
		traceRow{0, 600, 10, []int64{0, 1}}.line(),                // 0: its last block partial
		traceRow{0, 1200, 10, []int64{0, 2, 5}}.line(),            // 1: only block 0 in common with 0
		traceRow{1000, 1100, 10, []int64{0, 1, 3}}.line(),         // 2: continues 0 with all its ids
		traceRow{1500, 1100, 10, []int64{0, 9, 10}}.line(),        // 3: new
		traceRow{1500, 1250, 10, []int64{0, 9, 16}}.line(),        // 4: would continue 3, at the same instant: new
		traceRow{2000, 1600, 10, []int64{0, 1, 3, 11}}.line(),     // 5: continues 2
		traceRow{2500, 1100, 10, []int64{0, 1, 12}}.line(),        // 6: would continue 0, continued already: new
		traceRow{3000, 1600, 10, []int64{0, 2, 13, 14}}.line(),    // 7: continues 1 by all but its partial block
		traceRow{3000, 2100, 10, []int64{0, 1, 3, 11, 15}}.line(), // 8: continues 5
	}, "\n")
	c := rebuildConversations(mustTrace(t, text, 512))
	if want := []int{-1, -1, 0, -1, -1, 2, -1, 1, 5}; !slices.Equal(c.parent, want) {
		t.Fatalf("parents %v, want %v", c.parent, want)
	}
	if len(c.rows) != 5 || !slices.Equal(c.rows[0], []int{0, 2, 5, 8}) || !slices.Equal(c.rows[1], []int{1, 7}) || c.turn[8] != 3 {
		t.Fatalf("conversations %v, turns %v", c.rows, c.turn)
	}
}

func TestConversationsOfAGeneratedTraceAreItsOwn(t *testing.T) {
	text, want := genTrace(3, 60, 5, 30*time.Second, 512)
	tr := mustTrace(t, text, 512)
	c := rebuildConversations(tr)
	// the same partition: rows of one generated conversation, and only
	// those, share a rebuilt one
	of := map[int]int{}
	for i, g := range want {
		if k, ok := of[g]; ok && k != c.of[i] {
			t.Fatalf("row %d of conversation %d rebuilt into %d, its earlier turns into %d", i, g, c.of[i], k)
		}
		of[g] = c.of[i]
	}
	if len(c.rows) != 60 {
		t.Fatalf("%d conversations rebuilt, want 60", len(c.rows))
	}
}

func TestReplayPromptsAreEqualExactlyWhereIDsAre(t *testing.T) {
	x := newReplayText(1, 0, 64)
	a := x.prompt([]int64{0, 1, 2}, 150) // blocks of 64: 64, 64, 22
	b := x.prompt([]int64{0, 1, 5}, 190)
	c := x.prompt([]int64{0, 1, 2}, 140) // the same partial block, shorter
	if len(a) != 150+3 || len(b) != 190+3 {
		t.Fatalf("prompt lengths %d, %d: want the input plus 3 markers", len(a), len(b))
	}
	common := func(p, q []uint32) int {
		n := 0
		for n < len(p) && n < len(q) && p[n] == q[n] {
			n++
		}
		return n
	}
	if n := common(a, b); n != 1+128 {
		t.Fatalf("a and b share %d tokens, want the marker and two blocks (129)", n)
	}
	if n := common(a, c); n != 1+140 {
		t.Fatalf("a and c share %d tokens, want the marker and c's 140", n)
	}
	if want := sim.RenderPrompt("", []sim.Message{{Role: "user", Content: x.content([]int64{0, 1, 5}, 190)}}); !slices.Equal(b, want) {
		t.Fatal("the rendered tokens differ from the simulator's rendering of the text")
	}
	if other := newReplayText(1, 1, 64).prompt([]int64{0}, 64); common(other, a) != 1 {
		t.Fatal("another window's variant draws the same text")
	}
}

func TestReplayIdealCountsTheTracesReuse(t *testing.T) {
	text := strings.Join([]string{
		traceRow{0, 1000, 10, []int64{0, 1}}.line(),       // 1000 computed
		traceRow{1, 1000, 10, []int64{0, 1}}.line(),       // all 1000 cached (the partial block too)
		traceRow{2, 1600, 10, []int64{0, 2, 3, 4}}.line(), // block 0 cached: 512 of 1600
	}, "\n")
	tr := mustTrace(t, text, 512)
	u, p := replayIdeal(tr, []int{0, 1, 2}, 0)
	if want := (1000.0 + 512) / 3600; math.Abs(u-want) > 1e-9 || !math.IsNaN(p) {
		t.Fatalf("unlimited %v (want %v), pooled %v (want NaN)", u, want, p)
	}
	// a pooled cache of two blocks: row 2's four blocks evict 0 and 1
	// last-first, so a repeat of row 0 finds block 0 only if kept
	text += "\n" + traceRow{3, 1000, 10, []int64{0, 1}}.line()
	tr = mustTrace(t, text, 512)
	_, p = replayIdeal(tr, []int{0, 1, 2, 3}, 2*512)
	// row 1: 1000; row 2: block 0 (512); row 3: row 2 left 0 and 2 (its
	// first blocks most recent), so block 0 hits and 1 does not: 512
	if want := (1000.0 + 512 + 512) / 4600; math.Abs(p-want) > 1e-9 {
		t.Fatalf("pooled %v, want %v", p, want)
	}
}
