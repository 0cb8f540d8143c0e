package bench

import (
	"math/rand/v2"
	"strings"

	"github.com/lmwarden/lmwarden/sim"
)

// A replayed request's prompt is one user message, no system prompt, whose
// text is the trace's blocks one after the other: block j of the prompt is
// the text of its hash id, so equal ids at equal positions are equal text
// and equal tokens, and a replica's prefix cache meets exactly the reuse
// the trace records (the shared block 0 of every row included; it plays the
// system prompt's part). A block's text is drawn from its id alone, a
// word (one token) at a time; a partial last block is the first tokens of
// its id's text, so the prompt has exactly the trace's input length and the
// replica caches only the whole 16-token blocks of it, as it would a real
// partial block. Two different ids are different text, even where the
// real conversation's next turn began with the earlier turn's partial
// block: the replay keeps the trace's 512-token record of reuse, not a
// guess at the finer one (docs/workload.md says what that leaves out).

const replayTextSalt = 0x7e91_a700_0000_0006

// replayText draws the text of trace blocks for one window's variant.
type replayText struct {
	seed  uint64
	block int
	// user, end and assistant markers around the one user message, as
	// sim.RenderPrompt renders it
	open, close []uint32
}

// wordTokens is the simulator's token of each of words (one each).
var wordTokens = func() []uint32 {
	out := make([]uint32, len(words))
	for i, w := range words {
		out[i] = sim.Tokenize(w)[0]
	}
	return out
}()

func newReplayText(seed, variant uint64, block int) *replayText {
	frame := sim.RenderPrompt("", []sim.Message{{Role: "user"}})
	return &replayText{seed: seed ^ replayTextSalt ^ variant*0x9e3779b97f4a7c15, block: block,
		open: frame[:1], close: frame[1:]}
}

// words appends the word indices of a prompt of input tokens over ids.
func (x *replayText) words(out []int, ids []int64, input int) []int {
	for j, id := range ids {
		n := min(x.block, input-j*x.block)
		r := rand.New(rand.NewPCG(x.seed, uint64(id)))
		for range n {
			out = append(out, r.IntN(len(words)))
		}
	}
	return out
}

// content is the user message's text.
func (x *replayText) content(ids []int64, input int) string {
	var b strings.Builder
	b.Grow(input * sim.BytesPerToken)
	for _, w := range x.words(make([]int, 0, input), ids, input) {
		b.WriteString(words[w])
	}
	return b.String()
}

// prompt is the rendered prompt: sim.RenderPrompt of the one user message
// whose text content returns (tested), without building the text.
func (x *replayText) prompt(ids []int64, input int) []uint32 {
	out := make([]uint32, 0, input+len(x.open)+len(x.close))
	out = append(out, x.open...)
	for _, w := range x.words(make([]int, 0, input), ids, input) {
		out = append(out, wordTokens[w])
	}
	return append(out, x.close...)
}
