package placement

import "math"

// gapQuantiles estimates quantiles of the pause sessions take between a
// turn's end and their next request (the agent running tools, a person
// reading), so that admission can tell a session that is only between
// turns from one that has ended. Pauses are spread over six orders of
// magnitude (tens of milliseconds to an hour), so the estimate is a
// histogram with logarithmic buckets (each gapGrowth times the last)
// whose counts decay by gapDecay a sample: it follows the recent
// sessions, not the whole life of the warden.
type gapQuantiles struct {
	counts [gapBuckets]float64
	total  float64 // pauses seen (decayed): turns a session came back after
	ends   float64 // turn ends seen (decayed): each is followed by a pause or by the session's end
}

const (
	gapBuckets = 48
	gapFirst   = 0.01 // seconds: the upper edge of the first bucket
	gapGrowth  = 1.4  // 0.01 s · 1.4^47 ≈ 74 min for the last bucket
	gapDecay   = 1 - 1.0/1024
)

// add records one pause of d seconds.
func (g *gapQuantiles) add(d float64) {
	g.decay()
	g.total++
	g.counts[gapBucket(d)]++
}

// ended records a turn's end (its session's last request done).
func (g *gapQuantiles) ended() {
	g.decay()
	g.ends++
}

func (g *gapQuantiles) decay() {
	for i := range g.counts {
		g.counts[i] *= gapDecay
	}
	g.total *= gapDecay
	g.ends *= gapDecay
}

// likelyEnded returns the idle time after which a session is more likely
// to have ended than to come back, at least p (0-1): of the turn ends,
// the share f not followed by a pause is the sessions' end; after t idle,
// P(ended) = f / (f + (1-f)·S(t)), S(t) the share of pauses longer than t.
// False while too little is known (fewer than minEndsSeen ends).
func (g *gapQuantiles) likelyEnded(p float64) (float64, bool) {
	if g.ends < minEndsSeen {
		return 0, false
	}
	if g.total <= 0 {
		return 0, true // nobody ever came back
	}
	f := min(1, max(0, 1-g.total/g.ends))
	if f <= 0 {
		return 0, false
	}
	limit := f * (1 - p) / (p * (1 - f)) * g.total // pauses longer than t may number at most this
	above := g.total
	for i, c := range g.counts {
		if above <= limit {
			if i == 0 {
				return 0, true
			}
			return gapEdge(i - 1), true
		}
		above -= c
	}
	return gapEdge(gapBuckets - 1), true
}

// minEndsSeen turn ends are needed before likelyEnded answers.
const minEndsSeen = 32

func gapBucket(d float64) int {
	if d <= gapFirst {
		return 0
	}
	return min(gapBuckets-1, int(math.Ceil(math.Log(d/gapFirst)/math.Log(gapGrowth))))
}

// gapEdge is bucket i's upper edge in seconds.
func gapEdge(i int) float64 { return gapFirst * math.Pow(gapGrowth, float64(i)) }

// quantile returns the q-quantile in seconds, as the upper edge of the
// bucket that holds it (an over-estimate by at most gapGrowth), and false
// before any pause was seen.
func (g *gapQuantiles) quantile(q float64) (float64, bool) {
	if g.total <= 0 {
		return 0, false
	}
	want, sum := q*g.total, 0.0
	for i, c := range g.counts {
		if sum += c; sum >= want {
			return gapEdge(i), true
		}
	}
	return gapEdge(gapBuckets - 1), true
}
