package datapath

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// A profile of where an exchange spends its time in the shim, for the
// datapath's latency work (docs/kernel.md, "Profile"). With
// LMWARDEN_PHASES=FILE the shim notes the time at each step of an
// exchange (Conn.mark) and rewrites FILE every phaseEvery exchanges with
// each step's median and 90th percentile, apart for a connection's first
// exchange ("f:") and its keep-alive ones ("k:"). Off, a mark is one
// branch.
var phasesFile = os.Getenv("LMWARDEN_PHASES")

const (
	phaseEvery = 20
	phaseKeep  = 4096 // samples kept per step, the newest
)

// phaseMark is one step's name and time.
type phaseMark struct {
	name string
	at   time.Time
}

var phases struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	next    map[string]int // where the next sample goes once phaseKeep are kept
	count   int
}

// mark notes that the exchange on c reached step name.
func (c *Conn) Mark(name string) {
	if phasesFile == "" {
		return
	}
	c.marks = append(c.marks, phaseMark{name, time.Now()})
}

// flushMarks adds the exchange's steps to the profile (first: the
// connection's first exchange) and clears them.
func (c *Conn) FlushMarks(first bool) {
	if phasesFile == "" {
		return
	}
	defer func() { c.marks = c.marks[:0] }()
	if len(c.marks) < 2 {
		return
	}
	prefix := "k:"
	if first {
		prefix = "f:"
	}
	phases.mu.Lock()
	defer phases.mu.Unlock()
	if phases.samples == nil {
		phases.samples, phases.next = map[string][]time.Duration{}, map[string]int{}
	}
	for i := 1; i < len(c.marks); i++ {
		k := prefix + c.marks[i-1].name + ">" + c.marks[i].name
		d := c.marks[i].at.Sub(c.marks[i-1].at)
		if s := phases.samples[k]; len(s) < phaseKeep {
			phases.samples[k] = append(s, d)
		} else {
			s[phases.next[k]] = d
			phases.next[k] = (phases.next[k] + 1) % phaseKeep
		}
	}
	if phases.count++; phases.count%phaseEvery == 0 {
		writePhases()
	}
}

// writePhases rewrites the profile file; phases.mu is held.
func writePhases() {
	keys := make([]string, 0, len(phases.samples))
	for k := range phases.samples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		s := append([]time.Duration(nil), phases.samples[k]...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Fprintf(&b, "%-18s n=%5d p50=%9v p90=%9v\n", k, len(s), s[len(s)/2], s[len(s)*9/10])
	}
	_ = os.WriteFile(phasesFile, []byte(b.String()), 0o644)
}
