package sim

import (
	"fmt"
	"time"
)

// LBStats selects how current the queue stats behind vLLM's data-parallel
// balancer are (DESIGN.md, "Affinity off").
type LBStats int

const (
	// LBStatsFresh: the coordinator publishes every rank's waiting and
	// running counts every 100 ms (vLLM's default).
	LBStatsFresh LBStats = iota
	// LBStatsStale: the published counts lag by StaleLag.
	LBStatsStale
	// LBStatsNone: no queue stats are published (dense models in some
	// releases): only the local bumps remain, which is round robin.
	LBStatsNone
)

// Timing of the coordinator's stats.
const (
	LBPublishInterval = 100 * time.Millisecond
	LBStaleLag        = time.Second
)

// String is the flag spelling.
func (m LBStats) String() string {
	switch m {
	case LBStatsFresh:
		return "fresh"
	case LBStatsStale:
		return "stale"
	case LBStatsNone:
		return "none"
	}
	return fmt.Sprintf("LBStats(%d)", int(m))
}

// ParseLBStats reads "fresh", "stale" or "none"; "" is fresh.
func ParseLBStats(s string) (LBStats, error) {
	switch s {
	case "", "fresh":
		return LBStatsFresh, nil
	case "stale":
		return LBStatsStale, nil
	case "none":
		return LBStatsNone, nil
	}
	return 0, fmt.Errorf("%w: %q (want fresh, stale or none)", ErrBadLBStats, s)
}

// DPBalancer is vLLM's own data-parallel balancer (DPLBAsyncMPClient): pick
// the rank with the lowest waiting*4+running from the coordinator's last
// published counts, bump the chosen rank's waiting count locally until the
// next publish, and scan from a start index that rotates each decision so
// ties spread. Not safe for concurrent use; callers hold their own lock.
type DPBalancer struct {
	mode    LBStats
	waiting []int // counts as the balancer believes them (published + local bumps)
	running []int
	start   int

	nextPublish time.Time
	history     []lbSample // LBStatsStale: samples not yet old enough
}

type lbSample struct {
	at               time.Time
	waiting, running []int
}

// NewDPBalancer returns a balancer over ranks ranks.
func NewDPBalancer(ranks int, mode LBStats) *DPBalancer {
	return &DPBalancer{mode: mode, waiting: make([]int, ranks), running: make([]int, ranks)}
}

// Mode is the stats mode the balancer was made with.
func (b *DPBalancer) Mode() LBStats { return b.mode }

// Observe offers the ranks' current counts, as the engines report them to the
// coordinator. Call it as often as convenient (every decision is fine): the
// balancer applies a publish at most every LBPublishInterval, LBStaleLag old
// in LBStatsStale, and never in LBStatsNone.
func (b *DPBalancer) Observe(now time.Time, waiting, running []int) {
	if b.mode == LBStatsNone || now.Before(b.nextPublish) {
		return
	}
	b.nextPublish = now.Add(LBPublishInterval)
	switch b.mode {
	case LBStatsFresh:
		copy(b.waiting, waiting)
		copy(b.running, running)
	case LBStatsStale:
		b.history = append(b.history, lbSample{
			at:      now,
			waiting: append([]int(nil), waiting...),
			running: append([]int(nil), running...),
		})
		// apply the newest sample that is at least LBStaleLag old
		k := -1
		for i, s := range b.history {
			if now.Sub(s.at) >= LBStaleLag {
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
func (b *DPBalancer) Pick(now time.Time, eligible func(rank int) bool) int {
	n := len(b.waiting)
	best, bestScore := -1, 0
	for i := range n {
		r := (b.start + i) % n
		if eligible != nil && !eligible(r) {
			continue
		}
		score := b.waiting[r]*4 + b.running[r]
		if best < 0 || score < bestScore {
			best, bestScore = r, score
		}
	}
	if n > 0 {
		b.start = (b.start + 1) % n
	}
	if best >= 0 {
		b.waiting[best]++
	}
	return best
}

// Counts returns the counts the balancer currently believes (for tests and
// the admin view).
func (b *DPBalancer) Counts() (waiting, running []int) {
	return append([]int(nil), b.waiting...), append([]int(nil), b.running...)
}
