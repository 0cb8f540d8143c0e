package datapath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The profile names each step by the marks around it, keeps a
// connection's first exchange apart from its keep-alive ones, and
// bounds what it keeps.
func TestPhaseProfileNamesStepsAndBoundsSamples(t *testing.T) {
	file := filepath.Join(t.TempDir(), "phases")
	old := phasesFile
	phasesFile = file
	t.Cleanup(func() { phasesFile = old; phases.samples, phases.next, phases.count = nil, nil, 0 })

	c := &Conn{}
	for i := range phaseKeep + phaseEvery {
		c.Mark("head")
		time.Sleep(time.Microsecond)
		c.Mark("placed")
		c.FlushMarks(i == 0)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if !strings.Contains(out, "f:head>placed") || !strings.Contains(out, "k:head>placed") {
		t.Fatalf("profile lacks a step:\n%s", out)
	}
	if n := len(phases.samples["k:head>placed"]); n != phaseKeep {
		t.Fatalf("kept %d samples of a step, want the newest %d", n, phaseKeep)
	}
	if len(c.marks) != 0 {
		t.Fatalf("marks left after a flush: %d", len(c.marks))
	}
}
