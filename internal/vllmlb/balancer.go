// Package vllmlb is a model of vLLM's own data-parallel balancer, the one a
// deployment has when affinity is off: the agent's policy vllm-lb runs it
// in the per-replica shape, and the simulator runs it behind one endpoint in
// the ranks shape. It lives apart from both so that the production daemon's
// decisions never depend on the simulator (docs/architecture.md).
package vllmlb

import (
	"errors"
	"fmt"
	"time"

	"github.com/lmwarden/lmwarden/internal/least"
)

// ErrBadStatsMode is returned by ParseStatsMode for an unknown spelling.
var ErrBadStatsMode = errors.New("vllmlb: unknown lb-stats mode")

// StatsMode selects how current the queue stats behind the balancer are
// (docs/architecture.md, "Affinity off"): vLLM's coordinator publishes
// every rank's counts every 100 ms, some releases publish them late, and
// some (dense models) not at all.
type StatsMode int

const (
	// Fresh: the coordinator publishes every rank's waiting and
	// running counts every 100 ms (vLLM's default).
	Fresh StatsMode = iota
	// Stale: the published counts lag by StaleLag.
	Stale
	// None: no queue stats are published (dense models in some
	// releases): only the local bumps remain, which is round robin.
	None
)

// Timing of the coordinator's stats.
const (
	PublishInterval = 100 * time.Millisecond
	StaleLag        = time.Second
)

// String is the flag spelling.
func (m StatsMode) String() string {
	switch m {
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	case None:
		return "none"
	}
	return fmt.Sprintf("StatsMode(%d)", int(m))
}

// ParseStatsMode reads "fresh", "stale" or "none"; "" is fresh.
func ParseStatsMode(s string) (StatsMode, error) {
	switch s {
	case "", "fresh":
		return Fresh, nil
	case "stale":
		return Stale, nil
	case "none":
		return None, nil
	}
	return 0, fmt.Errorf("%w: %q (want fresh, stale or none)", ErrBadStatsMode, s)
}

// Balancer is vLLM's own data-parallel balancer (DPLBAsyncMPClient): pick
// the rank with the lowest waiting*4+running from the coordinator's last
// published counts, bump the chosen rank's waiting count locally until the
// next publish, and scan from a start index that rotates each decision so
// ties spread. Not safe for concurrent use; callers hold their own lock.
type Balancer struct {
	mode    StatsMode
	waiting []int // counts as the balancer believes them (published + local bumps)
	running []int
	start   int

	nextPublish time.Time
	history     []sample // Stale: samples not yet old enough
}

type sample struct {
	at               time.Time
	waiting, running []int
}

// New returns a balancer over ranks ranks.
func New(ranks int, mode StatsMode) *Balancer {
	return &Balancer{mode: mode, waiting: make([]int, ranks), running: make([]int, ranks)}
}

// Mode is the stats mode the balancer was made with.
func (b *Balancer) Mode() StatsMode { return b.mode }

// Observe offers the ranks' current counts, as the engines report them to the
// coordinator. Call it as often as convenient (every decision is fine): the
// balancer applies a publish at most every PublishInterval, StaleLag old
// in Stale, and never in None.
func (b *Balancer) Observe(now time.Time, waiting, running []int) {
	if b.mode == None || now.Before(b.nextPublish) {
		return
	}
	b.nextPublish = now.Add(PublishInterval)
	switch b.mode {
	case Fresh:
		copy(b.waiting, waiting)
		copy(b.running, running)
	case Stale:
		b.history = append(b.history, sample{
			at:      now,
			waiting: append([]int(nil), waiting...),
			running: append([]int(nil), running...),
		})
		// apply the newest sample that is at least StaleLag old
		k := -1
		for i, s := range b.history {
			if now.Sub(s.at) >= StaleLag {
				k = i
			}
		}
		if k >= 0 {
			copy(b.waiting, b.history[k].waiting)
			copy(b.running, b.history[k].running)
			b.history = append(b.history[:0], b.history[k+1:]...)
		}
	}
}

// Pick returns the rank with the lowest waiting*4+running among eligible ranks
// (nil: all), the first found scanning from the rotating start index, and
// bumps its waiting count. -1 when no rank is eligible.
func (b *Balancer) Pick(now time.Time, eligible func(rank int) bool) int {
	best := least.By(&b.start, len(b.waiting), func(r int) (int, bool) {
		return b.waiting[r]*4 + b.running[r], eligible == nil || eligible(r)
	})
	if best >= 0 {
		b.waiting[best]++
	}
	return best
}

// Counts returns the counts the balancer currently believes (for tests and
// the admin view).
func (b *Balancer) Counts() (waiting, running []int) {
	return append([]int(nil), b.waiting...), append([]int(nil), b.running...)
}
