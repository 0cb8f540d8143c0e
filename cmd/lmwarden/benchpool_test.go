package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/bench"
)

// bench-pool end to end: two seeded runs written by the bench's own
// writers, the table on --out with flags after the groups; and the exit
// codes of what it refuses.
func TestBenchPoolCommand(t *testing.T) {
	root := t.TempDir()
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, seed := range []uint64{1, 2} {
		dir := filepath.Join(root, "run-s"+string(rune('0'+seed)))
		step := bench.Step{Sessions: 2}
		rep := &bench.Report{Mode: "virtual", Replicas: 2, Seed: seed, StepSeconds: 60, Steps: []bench.Step{step}, Arms: []string{"sticky", "cost"}}
		tr := &bench.TraceRecorder{}
		for i, arm := range rep.Arms {
			tr.Window(step, arm, start)
			tr.Request(bench.TraceRequest{Session: "s", Turn: 1, Sent: start.Add(time.Second), TTFT: float64(1 + i),
				Done: start.Add(3 * time.Second), Prompt: 10, Cached: 5, Output: 100 * (1 + i)})
		}
		b, _ := json.Marshal(rep)
		if err := tr.Write(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, bench.ReportJSON), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(root, "pool.md")
	if code := run([]string{"bench-pool", filepath.Join(root, "run-s*"), "--out", out, "--boot", "50"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "| cost | 2 | 2.00s | 2.00s |") || !strings.Contains(string(b), "| 2.00 [2.00, 2.00] | 2.00 [2.00, 2.00] |") {
		t.Errorf("table:\n%s", b)
	}
	for args, want := range map[string]int{
		"":                             2, // no group
		"x=":                           2,
		root + "/nothing-*":            1,
		"--boot 0 " + root + "/run-s*": 2,
	} {
		if code := run(append([]string{"bench-pool"}, strings.Fields(args)...)); code != want {
			t.Errorf("bench-pool %s: exit %d, want %d", args, code, want)
		}
	}
}
