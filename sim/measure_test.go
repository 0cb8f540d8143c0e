package sim

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// roundTripConstants are the constants of a profile that calibration
// measures, as the step model uses them.
func roundTripConstants(p Profile) map[string]float64 {
	return map[string]float64{
		"KV tokens":                   float64(p.KVTokens()),
		"block size":                  float64(p.BlockSize),
		"max_model_len":               float64(p.MaxModelLen),
		"max_num_batched_tokens":      float64(p.MaxNumBatchedTokens),
		"gpu_memory_utilization":      p.GPUMemoryUtilization,
		"compute, FLOP/s (effective)": p.PeakFLOPS * p.ComputeEfficiency,
		"memory, B/s (effective)":     p.MemBytesPerSec * p.MemoryEfficiency,
		"weights read a step, B":      p.WeightBytes,
		"attention width":             float64(p.HiddenSize),
		"step overhead, s":            p.StepOverhead.Seconds(),
	}
}

// roundTrip calibrates against a simulator running a profile.
func roundTrip(t *testing.T, want Profile) (Profile, Profile, *Measurement) {
	t.Helper()
	s := mustServe(t, ServerConfig{Replicas: 1, Profile: want, Speed: 2000})
	var lines []string
	got, err := Measure(context.Background(), MeasureConfig{URL: s.URLs()[0], Rank: -1, Like: want,
		Progress: func(done, total int, what string) { lines = append(lines, fmt.Sprintf("%d/%d %s", done, total, what)) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 8 || !strings.Contains(lines[len(lines)-1], "batch 8") {
		t.Fatalf("progress: %q", lines)
	}
	return want, got.Profile, got
}

func TestCalibrateGivesTheSimulatorsProfileBack(t *testing.T) {
	var cases []Profile
	for _, name := range ProfileNames() {
		p, err := LookupProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.PrefillFloor > 0 || p.PrefillContextRate > 0 {
			// terms calibration does not measure (fitted to a forward
			// pass: TestH200ProfileReproducesMeasuredPrefill holds them)
			continue
		}
		cases = append(cases, p)
	}
	// a card and settings of no built-in profile
	odd := cases[0]
	odd.Name, odd.KVCapacityTokens, odd.BlockSize, odd.MaxNumBatchedTokens = "odd", 50_000, 32, 1024
	odd.StepOverhead, odd.PeakFLOPS, odd.MemBytesPerSec, odd.MaxModelLen = 5*time.Millisecond, 120e12, 900e9, 24_000
	cases = append(cases, odd)
	for _, want := range cases {
		name := want.Name
		want, got, m := roundTrip(t, want)
		wc, gc := roundTripConstants(want), roundTripConstants(got)
		var b strings.Builder
		for k, w := range wc {
			g := gc[k]
			rel := math.Abs(g-w) / math.Abs(w)
			fmt.Fprintf(&b, "%s: %g -> %g (%.2f%%)\n", k, w, g, 100*rel)
			if rel > 0.05 {
				t.Errorf("%s: %s %g measured as %g (%.1f%% off)", name, k, w, g, 100*rel)
			}
		}
		t.Logf("%s:\n%s%s", name, b.String(), strings.Join(m.Points, "\n"))
		// the written file reads back as the same profile
		out, err := WriteProfile(got, "calibrated")
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseProfile(out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if back.KVTokens() != got.KVTokens() || back.StepOverhead != got.StepOverhead || back.PeakFLOPS != got.PeakFLOPS {
			t.Fatalf("profile file does not read back: %+v vs %+v", back, got)
		}
	}
}
