package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Step is one step of a run. Closed loop (the default): Sessions sessions
// at a time, a finished one replaced at once. Open loop (Arrivals
// "poisson"): new sessions arrive at PerMin a minute, a Poisson process,
// whatever the ones in progress are doing. CacheLoad, when the step was
// stated as a load ("1.5x"), is the live context it asks for over the
// replicas' total KV cache; ResolveSteps (load.go) turns it into Sessions
// or PerMin.
type Step struct {
	Sessions  int     `json:"sessions"`
	Arrivals  string  `json:"arrivals,omitempty"` // "" (closed) or ArrivalsPoisson
	PerMin    float64 `json:"arrivals_per_min,omitempty"`
	CacheLoad float64 `json:"load,omitempty"`
	// ReplaySpeed, in a trace replay, is how many seconds of the trace's
	// time pass in a second (replay.go); the other fields are then unused.
	ReplaySpeed float64 `json:"replay_speed,omitempty"`
}

// ReplaySpeeds is the steps of a replay at each speed.
func ReplaySpeeds(speeds ...float64) []Step {
	out := make([]Step, len(speeds))
	for i, v := range speeds {
		out[i] = Step{ReplaySpeed: v}
	}
	return out
}

// ParseReplaySpeeds reads --replay-speed: positive factors, "1,10,20".
func ParseReplaySpeeds(list string) ([]Step, error) {
	var out []Step
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(part), "x"))
		if part == "" {
			continue
		}
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: replay speed %q: want a positive factor such as 10 (ten seconds of the trace a second)", ErrBadConfig, part)
		}
		out = append(out, Step{ReplaySpeed: v})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no replay speed", ErrBadConfig)
	}
	return out, nil
}

// ArrivalsPoisson names the open loop.
const ArrivalsPoisson = "poisson"

// Sessions is closed-loop steps of n sessions each.
func Sessions(n ...int) []Step {
	out := make([]Step, len(n))
	for i, s := range n {
		out[i] = Step{Sessions: s}
	}
	return out
}

// Open says whether sessions arrive at a rate.
func (s Step) Open() bool { return s.Arrivals == ArrivalsPoisson }

// String names the step in tables and progress lines: "24", "3/min",
// "1.5x (17)", "1.5x (3.2/min)".
func (s Step) String() string {
	if s.ReplaySpeed > 0 {
		return "×" + strconv.FormatFloat(s.ReplaySpeed, 'g', 4, 64)
	}
	var n string
	switch {
	case s.Open():
		n = strconv.FormatFloat(s.PerMin, 'g', 3, 64) + "/min"
	default:
		n = strconv.Itoa(s.Sessions)
	}
	if s.CacheLoad <= 0 {
		return n
	}
	l := strconv.FormatFloat(s.CacheLoad, 'g', 3, 64) + "x"
	if s.Sessions == 0 && s.PerMin == 0 {
		return l // not sized yet
	}
	return l + " (" + n + ")"
}

// phrase names the step in a sentence: "24 sessions", "arrivals 3/min".
func (s Step) phrase() string {
	if s.ReplaySpeed > 0 {
		return "replay at " + s.String()
	}
	if s.Open() {
		return "arrivals " + s.String()
	}
	return s.String() + " sessions"
}

// fileLabel names the step in a file name: "24", "3.2permin", "1.5x-17".
func (s Step) fileLabel() string {
	return strings.NewReplacer("/", "per", " (", "-", ")", "", " ", "", "×", "speed").Replace(s.String())
}

// value is where the step sits on a plot's x axis.
func (s Step) value() float64 {
	switch {
	case s.ReplaySpeed > 0:
		return s.ReplaySpeed
	case s.CacheLoad > 0:
		return s.CacheLoad
	case s.Open():
		return s.PerMin
	}
	return float64(s.Sessions)
}

// sized says whether the step can run (a load step is sized by ResolveSteps).
func (s Step) sized() bool {
	if s.ReplaySpeed > 0 {
		return !math.IsInf(s.ReplaySpeed, 0)
	}
	if s.Open() {
		return s.PerMin > 0 && !math.IsInf(s.PerMin, 0)
	}
	return s.Sessions >= 1
}

// ParseSteps reads --steps and --arrivals. arrivals is "closed" (or ""),
// "poisson", or "poisson:RATE" (one step at RATE; list must then be
// empty). Each step of list is a load ("1.5x": live context over the total
// KV cache), or a number: sessions at a time in a closed loop, arrivals a
// minute in an open one ("3", "3/min", "0.2/s", "30/h").
func ParseSteps(list, arrivals string) ([]Step, error) {
	kind, rate, hasRate := strings.Cut(arrivals, ":")
	switch kind {
	case "", "closed":
		if hasRate {
			return nil, fmt.Errorf("%w: arrivals %q: a closed loop has no rate", ErrBadConfig, arrivals)
		}
		kind = ""
	case ArrivalsPoisson:
	default:
		return nil, fmt.Errorf("%w: arrivals %q (want closed, poisson or poisson:RATE such as poisson:3/min)", ErrBadConfig, arrivals)
	}
	if hasRate {
		if strings.TrimSpace(list) != "" {
			return nil, fmt.Errorf("%w: arrivals %q names its one rate: give no steps with it", ErrBadConfig, arrivals)
		}
		list = rate
	}
	var steps []Step
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		s, err := parseStep(part, kind)
		if err != nil {
			return nil, fmt.Errorf("%w: step %q: %v", ErrBadConfig, part, err)
		}
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%w: no steps", ErrBadConfig)
	}
	return steps, nil
}

func parseStep(part, arrivals string) (Step, error) {
	s := Step{Arrivals: arrivals}
	if l, ok := strings.CutSuffix(part, "x"); ok {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return s, fmt.Errorf("want a positive load such as 1.5x")
		}
		s.CacheLoad = v
		return s, nil
	}
	if !s.Open() {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return s, fmt.Errorf("want a positive number of sessions (or a load such as 1.5x)")
		}
		s.Sessions = n
		return s, nil
	}
	num, unit, _ := strings.Cut(part, "/")
	per := map[string]float64{"": 1, "min": 1, "s": 60, "h": 1.0 / 60}
	scale, ok := per[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || !(v > 0) || math.IsInf(v, 0) {
		return s, fmt.Errorf("want a positive rate of new sessions: 3, 3/min, 0.2/s or 30/h (or a load such as 1.5x)")
	}
	s.PerMin = v * scale
	return s, nil
}

// arrivalsSalt seeds the open loop's arrival times.
const arrivalsSalt = 0xa771_0000_0000_0005

// arrivalTimes are the open loop's session arrivals within a window, as
// offsets from its start: exponential gaps at the step's rate, drawn from
// the seed and the rate alone, so every arm meets the same arrivals.
func arrivalTimes(seed uint64, s Step, window time.Duration) []time.Duration {
	if !s.Open() || !(s.PerMin > 0) {
		return nil
	}
	r := rand.New(rand.NewPCG(seed^arrivalsSalt, math.Float64bits(s.PerMin)))
	mean := float64(time.Minute) / s.PerMin
	var out []time.Duration
	for t := r.ExpFloat64() * mean; t < float64(window); t += r.ExpFloat64() * mean {
		out = append(out, time.Duration(t))
	}
	return out
}
