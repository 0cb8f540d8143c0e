package placement

import "time"

// hitRateWindow computes a replica's prefix-cache hit rate as
// delta(hits)/delta(queries) between the oldest sample inside the window and
// the newest. A counter that goes down means the replica restarted (a reset),
// not a negative hit rate: the samples before it are dropped and the window
// starts again from the reset.
type hitRateWindow struct {
	window  time.Duration
	samples []hitSample // oldest first
	rate    float64     // last computed rate; kept while no queries arrive
	valid   bool
}

type hitSample struct {
	at            time.Time
	queries, hits float64
}

// maxHitSamples bounds memory: 30 s at 250 ms is 120 samples; beyond the
// bound the oldest go first, which only shortens the window.
const maxHitSamples = 256

func (w *hitRateWindow) add(now time.Time, queries, hits float64) {
	if n := len(w.samples); n > 0 {
		last := w.samples[n-1]
		if queries < last.queries || hits < last.hits {
			w.samples = w.samples[:0] // counter reset
		}
	}
	if len(w.samples) == maxHitSamples {
		w.samples = append(w.samples[:0], w.samples[1:]...)
	}
	w.samples = append(w.samples, hitSample{at: now, queries: queries, hits: hits})
	// drop samples older than the window, keeping one at or before its start
	cut := 0
	for cut+1 < len(w.samples) && now.Sub(w.samples[cut+1].at) >= w.window {
		cut++
	}
	if cut > 0 {
		w.samples = append(w.samples[:0], w.samples[cut:]...)
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	dq := last.queries - first.queries
	if dq > 0 {
		w.rate = (last.hits - first.hits) / dq
		w.valid = true
	}
}

// value is the hit rate in 0-1, and false before any query was seen.
func (w *hitRateWindow) value() (float64, bool) { return w.rate, w.valid }
