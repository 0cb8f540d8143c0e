package bench

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// poolTurn is one trace row a test writes: seconds from the window's start.
type poolTurn struct {
	session             string
	turn                int
	sent, ttft, done    float64
	prompt, cached, out int
	parked              float64
	cut                 bool
}

// writePoolRun writes a --out directory as `bench --virtual --trace` does,
// with the package's own writers: report.json and trace_requests.csv.
func writePoolRun(t *testing.T, dir string, seed uint64, replicas int, step Step, arms map[string][]poolTurn) {
	t.Helper()
	rep := &Report{Mode: "virtual", Profile: "h200-qwen3-4b", Replicas: replicas, Seed: seed,
		StepSeconds: 120, Steps: []Step{step}, Workload: "claude-code"}
	tr := &TraceRecorder{}
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	for _, arm := range []string{"a", "b"} {
		turns, ok := arms[arm]
		if !ok {
			continue
		}
		rep.Arms = append(rep.Arms, arm)
		tr.Window(step, arm, start)
		for _, x := range turns {
			tr.Request(TraceRequest{Session: x.session, Turn: x.turn, Kind: "sticky", Sent: at(x.sent), TTFT: x.ttft,
				Done: at(x.done), Prompt: x.prompt, Cached: x.cached, Output: x.out, Parked: x.parked, Cut: x.cut})
		}
	}
	if err := tr.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportJSON), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// scaledTurns are ten measured turns with TTFT k*(base+1..base+10) and
// output out each, plus a warm-up turn, a cut turn and a turn without a
// token that must not count in TTFT.
func scaledTurns(base, k float64, out int) []poolTurn {
	var ts []poolTurn
	for i := 1; i <= 10; i++ {
		x := poolTurn{session: "s", turn: i, sent: float64(i), ttft: k * (base + float64(i)), prompt: 100, cached: 50, out: out}
		x.done = x.sent + 2*x.ttft
		if i == 1 {
			x.session, x.cached = "s/agent", 100 // a subagent's later turn, all cached
		}
		if i == 2 {
			x.parked = 0.5
		}
		ts = append(ts, x)
	}
	return append(ts,
		poolTurn{session: "s", sent: -5, ttft: 999, done: -1, prompt: 100, out: 9999},     // warm-up
		poolTurn{session: "s", sent: 100, ttft: 999, done: 120, prompt: 100, cut: true},   // cut
		poolTurn{session: "t", sent: 50, ttft: math.NaN(), done: 60, prompt: 100, out: 0}, // no token
	)
}

// Two seeds pooled: percentiles of the twenty turns by nearest rank, the
// per-seed counts, and the ratios to the baseline on the seeds both have
// (b's third seed has no partner and must not move them).
func TestPoolPooledPercentilesAndPairedRatio(t *testing.T) {
	root := t.TempDir()
	for seed, base := range map[uint64]float64{1: 0, 2: 10} {
		// the load sizes the step differently per seed, as claude-code does
		step := Step{CacheLoad: 1, Sessions: 20 + int(seed)}
		writePoolRun(t, filepath.Join(root, "run-s"+string(rune('0'+seed))), seed, 4, step,
			map[string][]poolTurn{"a": scaledTurns(base, 1, 60), "b": scaledTurns(base, 2, 30)})
	}
	writePoolRun(t, filepath.Join(root, "extra-s3"), 3, 4, Step{CacheLoad: 1, Sessions: 30},
		map[string][]poolTurn{"b": scaledTurns(0, 10, 100000)})
	specs := []PoolSpec{{Glob: filepath.Join(root, "run-s*")}, {Label: "b3", Glob: filepath.Join(root, "*-s*"), Arm: "b"}}
	p, err := ReadPool(specs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.labels(), ","); got != "a,b,b3" {
		t.Fatalf("groups %s, want a,b,b3", got)
	}
	rows, err := p.Rows("1x", "a", 200)
	if err != nil {
		t.Fatal(err)
	}
	a, b, b3 := rows[0], rows[1], rows[2]
	// a's TTFTs pooled are 1..20: p50 rank 10, p95 rank 19, p99 rank 20.
	if a.TTFTP50 != 10 || a.TTFTP95 != 19 || a.TTFTP99 != 20 || a.Seeds != 2 {
		t.Errorf("a: seeds %d TTFT p50/p95/p99 %v/%v/%v, want 2 seeds 10/19/20", a.Seeds, a.TTFTP50, a.TTFTP95, a.TTFTP99)
	}
	// completions are sent + 2 TTFT - sent = 2 TTFT, and the no-token turn's 10 s
	if a.TurnP50 != 18 || a.TurnP95 != 38 {
		t.Errorf("a: turn p50/p95 %v/%v, want 18/38", a.TurnP50, a.TurnP95)
	}
	// b's are 2..40: over 20 s are 22..40, ten turns on two seeds.
	if b.TTFTP95 != 38 || b.SlowPerSeed != 5 || a.SlowPerSeed != 0 {
		t.Errorf("b: p95 %v, slow a seed %v (a %v), want 38, 5 (0)", b.TTFTP95, b.SlowPerSeed, a.SlowPerSeed)
	}
	// a: 10 turns x 60 tokens a seed over a 2-minute window.
	if a.OutputPerMin != 300 {
		t.Errorf("a: output a minute %v, want 300", a.OutputPerMin)
	}
	// 11 measured turns a seed of 100 prompt tokens: 9 with 50 cached, one
	// with 100, the no-token one with 0; one turn of 11 parked.
	if want := 550.0 / 1100; a.HitRate != want || a.SubagentLaterCached != 1 || a.ParkedShare != 1.0/11 {
		t.Errorf("a: hit %v subagents %v parked %v, want %v 1 %v", a.HitRate, a.SubagentLaterCached, a.ParkedShare, want, 1.0/11)
	}
	if !a.Baseline || b.Baseline {
		t.Errorf("baseline flags a %v b %v", a.Baseline, b.Baseline)
	}
	for _, r := range []PoolRow{b, b3} {
		if r.TTFTP95Ratio != (PoolInterval{Point: 2, Lo: 2, Hi: 2, Seeds: 2}) || r.Output != (PoolInterval{Point: 0.5, Lo: 0.5, Hi: 0.5, Seeds: 2}) {
			t.Errorf("%s: p95 %+v output %+v, want 2 [2, 2] and 0.5 [0.5, 0.5] on 2 seeds", r.Label, r.TTFTP95Ratio, r.Output)
		}
	}
	var sb strings.Builder
	if err := p.WriteTable(&sb, "", 10); err != nil || !strings.HasPrefix(sb.String(), "### 1x (21-30 sessions)\n") {
		t.Errorf("table heading (%v):\n%s", err, sb.String())
	}
	if b3.Seeds != 3 || b3.OutputPerMin != (300+300+1000000)/3.0/2 {
		t.Errorf("b3: %d seeds, output a minute %v", b3.Seeds, b3.OutputPerMin)
	}
}

// The bootstrap over seeds draws from a fixed source: the same runs give
// the same interval, and seeds that disagree give an interval that is not
// a point.
func TestPoolBootstrapIsReproducible(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	for seed := uint64(1); seed <= 8; seed++ {
		k := 0.5 + rng.Float64() // b's TTFT and output relative to a differ by seed
		writePoolRun(t, filepath.Join(root, "s"+string(rune('0'+seed))), seed, 4, Step{Sessions: 10},
			map[string][]poolTurn{"a": scaledTurns(float64(seed), 1, 100), "b": scaledTurns(float64(seed), k, int(100*k))})
	}
	var first string
	for range 2 {
		p, err := ReadPool([]PoolSpec{{Glob: filepath.Join(root, "s*")}})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := p.Rows("10", "a", 300)
		if err != nil {
			t.Fatal(err)
		}
		b := rows[1]
		if !(b.Output.Lo < b.Output.Point && b.Output.Point < b.Output.Hi) || !(b.TTFTP95Ratio.Lo < b.TTFTP95Ratio.Hi) {
			t.Errorf("intervals p95 %v output %v: want a spread around the point", b.TTFTP95Ratio, b.Output)
		}
		var sb strings.Builder
		if err := p.WriteTable(&sb, "", 300); err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = sb.String()
			if !strings.Contains(first, "| b | 8 |") || !strings.Contains(first, b.Output.String()) {
				t.Errorf("table lacks b's row or interval %s:\n%s", b.Output, first)
			}
		} else if sb.String() != first {
			t.Errorf("two readings differ:\n%s\n%s", first, sb.String())
		}
	}
}

// What bench-pool refuses, each with an error that says why.
func TestPoolRefuses(t *testing.T) {
	root := t.TempDir()
	two := map[string][]poolTurn{"a": scaledTurns(0, 1, 1), "b": scaledTurns(0, 1, 1)}
	writePoolRun(t, filepath.Join(root, "x-s1"), 1, 4, Step{Sessions: 10}, two)
	writePoolRun(t, filepath.Join(root, "x-s2"), 2, 4, Step{Sessions: 10}, two)
	writePoolRun(t, filepath.Join(root, "dup-s1"), 1, 4, Step{Sessions: 10}, two)
	writePoolRun(t, filepath.Join(root, "r8-s3"), 3, 8, Step{Sessions: 10}, two)
	writePoolRun(t, filepath.Join(root, "steps-s3"), 3, 4, Step{Sessions: 12}, two)
	writePoolRun(t, filepath.Join(root, "notrace-s4"), 4, 4, Step{Sessions: 10}, two)
	if err := os.Remove(filepath.Join(root, "notrace-s4", TraceRequestsCSV)); err != nil {
		t.Fatal(err)
	}
	g := func(s string) PoolSpec {
		p, err := ParsePoolSpec(filepath.Join(root, s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		specs []PoolSpec
		want  string
	}{
		{[]PoolSpec{g("x-s*"), g("r8-s*")}, "different experiments"},
		{[]PoolSpec{g("x-s*"), g("steps-s*")}, "different experiments"},
		{[]PoolSpec{g("*-s1:a")}, "seed 1 twice"},
		{[]PoolSpec{g("nothing-*")}, "matches no directory"},
		{[]PoolSpec{g("notrace-s*")}, "run bench with --trace"},
		{[]PoolSpec{g("x-s*:c")}, `no arm "c"`},
		{[]PoolSpec{g("x-s*:a"), g("dup-s*:a")}, `two groups are labelled "a"`},
	} {
		_, err := ReadPool(c.specs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.specs, err, c.want)
		}
	}
	p, err := ReadPool([]PoolSpec{g("x-s*")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteTable(&strings.Builder{}, "zzz", 10); err == nil || !strings.Contains(err.Error(), `--baseline "zzz"`) {
		t.Errorf("unknown baseline: %v", err)
	}
}

func TestParsePoolSpec(t *testing.T) {
	for in, want := range map[string]PoolSpec{
		"runs/main-s*":              {Glob: "runs/main-s*"},
		"runs/main-s*:cost":         {Glob: "runs/main-s*", Arm: "cost"},
		"cost=runs/main-s*:cost":    {Label: "cost", Glob: "runs/main-s*", Arm: "cost"},
		"old=runs/a:b/main-s*":      {Label: "old", Glob: "runs/a:b/main-s*"},
		"x=runs/m+sess-s{1..9}:sti": {Label: "x", Glob: "runs/m+sess-s{1..9}", Arm: "sti"},
	} {
		got, err := ParsePoolSpec(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"=runs/x", "runs/x:", "lab=", ""} {
		if _, err := ParsePoolSpec(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A resample as seed weights gives what pooling the drawn seeds' turns and
// taking Percentile gives, ties and empty seeds included.
func TestPoolWeightedPercentileIsPooledPercentile(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := &PoolGroup{Runs: map[uint64]*PoolRun{}}
	var seeds []uint64
	for s := uint64(1); s <= 6; s++ {
		x := &PoolTurns{}
		for range rng.IntN(30) { // seed 1..6 with 0-29 turns, values from a few levels
			x.TTFT = append(x.TTFT, float64(rng.IntN(12)))
		}
		g.Runs[s] = &PoolRun{Seed: s, Steps: map[string]*PoolTurns{"1x": x}}
		seeds = append(seeds, s)
	}
	w := newWeightedPool(g, "1x", seeds)
	for range 200 {
		weights := make([]int, len(seeds))
		var drawn []uint64
		for range seeds {
			i := rng.IntN(len(seeds))
			weights[i]++
			drawn = append(drawn, seeds[i])
		}
		pooled := g.pooled("1x", drawn).TTFT
		for _, p := range []float64{5, 50, 95, 99} {
			got, want := w.percentile(weights, p), Percentile(pooled, p)
			if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("weights %v p%v: %v, pooled %v", weights, p, got, want)
			}
		}
	}
}
