package bench

import (
	"math"
	"math/rand/v2"
)

// quantileDist is a distribution drawn to match published percentiles:
// log-normal through the median and the 90th percentile up to the 90th,
// then log-normal again (its own spread) from the 90th through the 99th
// and beyond, cut to [min, max]. A heavy tail that one log-normal cannot
// follow (a 99th percentile far past what the median and the 90th imply)
// keeps all three percentiles exact. With P99 zero the first log-normal
// goes on past the 90th percentile.
type quantileDist struct {
	P50, P90, P99 float64
	Min, Max      float64
}

var (
	z90 = normalQuantile(0.9)
	z99 = normalQuantile(0.99)
)

// normalQuantile is the standard normal distribution's quantile function.
func normalQuantile(u float64) float64 { return math.Sqrt2 * math.Erfinv(2*u-1) }

// at is the value of quantile u (0 < u < 1).
func (d quantileDist) at(u float64) float64 {
	z := normalQuantile(u)
	var v float64
	if z <= z90 || d.P99 <= 0 {
		v = d.P50 * math.Exp(z*math.Log(d.P90/d.P50)/z90)
	} else {
		v = d.P90 * math.Exp((z-z90)*math.Log(d.P99/d.P90)/(z99-z90))
	}
	return min(max(v, d.Min), d.Max)
}

// draw is one value.
func (d quantileDist) draw(r *rand.Rand) float64 {
	u := r.Float64()
	for u == 0 {
		u = r.Float64()
	}
	return d.at(u)
}

// drawInt is one value rounded to an integer.
func (d quantileDist) drawInt(r *rand.Rand) int { return int(math.Round(d.draw(r))) }
