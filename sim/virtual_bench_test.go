package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// closedLoop drives the benchmark workload (docs/workload.md) on a Virtual: sessions slots, each
// running six-turn sessions back to back (3,500-token shared system prompt,
// 7,200-7,500-token first message, five 400-token follow-ups, 256 output
// tokens, 20-80 ms pauses), a slot's sessions pinned to replica slot%N.
type closedLoop struct {
	v        *Virtual
	rng      *rand.Rand
	system   string
	nextID   uint64
	requests int
}

func newClosedLoop(v *Virtual, seed uint64) *closedLoop {
	rng := rand.New(rand.NewPCG(seed, 1))
	return &closedLoop{v: v, rng: rng, system: fillText(rng, 3500)}
}

func fillText(r *rand.Rand, tokens int) string {
	var b strings.Builder
	b.Grow(tokens * BytesPerToken)
	for range tokens {
		b.WriteString(outputWords[r.IntN(len(outputWords))])
	}
	return b.String()
}

func (c *closedLoop) startSession(slot, serial int) {
	replica := slot % c.v.Replicas()
	hist := []Message{{Role: "user", Content: fmt.Sprintf("session %04d-%06d ", slot, serial) + fillText(c.rng, 7200+c.rng.IntN(300))}}
	turn := 0
	var send func()
	send = func() {
		c.nextID++
		c.requests++
		c.v.Submit(replica, &Request{
			ID: c.nextID, Prompt: RenderPrompt(c.system, hist), MaxTokens: 256,
			OnDone: func(at time.Time, r Result) {
				turn++
				pause := time.Duration(20+c.rng.IntN(60)) * time.Millisecond
				if turn == 6 {
					c.v.At(at.Add(pause), func() { c.startSession(slot, serial+1) })
					return
				}
				hist = append(hist, Message{Role: "assistant", Content: r.OutputText},
					Message{Role: "user", Content: fillText(c.rng, 385+c.rng.IntN(31))})
				c.v.At(at.Add(pause), send)
			},
		})
	}
	c.v.At(c.v.Now().Add(time.Duration(c.rng.IntN(1000))*time.Millisecond), send)
}

// BenchmarkVirtualHour simulates one hour of 4 replicas under 32 closed-loop
// sessions (goal: under 30 s of wall time per op).
func BenchmarkVirtualHour(b *testing.B) {
	p := mustProfile(b, 0)
	for b.Loop() {
		v := NewVirtual(p, 4)
		c := newClosedLoop(v, 42)
		for s := range 32 {
			c.startSession(s, 0)
		}
		v.RunUntil(Epoch.Add(time.Hour))
		var q, h, gen uint64
		for i := range 4 {
			st := v.Stats(i)
			q, h, gen = q+st.PrefixQueries, h+st.PrefixHits, gen+st.GenerationTokens
		}
		b.ReportMetric(float64(c.requests), "requests")
		b.ReportMetric(float64(h)/float64(q), "hitrate")
		b.ReportMetric(float64(gen), "gen_tokens")
	}
}
