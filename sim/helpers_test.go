package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mustProfile returns the reference profile, optionally shrunk to blocks KV
// blocks so tests can run out of cache quickly.
func mustProfile(tb testing.TB, blocks int) Profile {
	tb.Helper()
	p, err := LookupProfile("a4000-qwen3-4b")
	if err != nil {
		tb.Fatal(err)
	}
	if blocks > 0 {
		p.KVCapacityTokens = blocks * p.BlockSize
		p.MaxModelLen = p.KVCapacityTokens
	}
	return p
}

// textOf returns deterministic text of about n tokens, distinct per tag.
func textOf(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n*BytesPerToken; i++ {
		fmt.Fprintf(&b, "%s-%d ", tag, i)
	}
	return b.String()[:n*BytesPerToken]
}

// collected is a request's observed outcome.
type collected struct {
	res        Result
	firstToken time.Time
	doneAt     time.Time
	tokens     int
	done       bool
}

func newReq(id uint64, prompt []uint32, maxTokens int) (*Request, *collected) {
	c := &collected{}
	return &Request{
		ID: id, Prompt: prompt, MaxTokens: maxTokens,
		OnFirstToken: func(at time.Time) { c.firstToken = at },
		OnToken:      func(time.Time, string) { c.tokens++ },
		OnDone: func(at time.Time, r Result) {
			if c.done {
				panic("OnDone twice")
			}
			c.res, c.doneAt, c.done = r, at, true
		},
	}, c
}

// runIdle runs a Virtual until no events remain.
func runIdle(tb testing.TB, v *Virtual) {
	tb.Helper()
	for {
		t, ok := v.NextEvent()
		if !ok {
			return
		}
		v.RunUntil(t)
	}
}
