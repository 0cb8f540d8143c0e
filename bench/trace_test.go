package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestAdmissionQueueParksSessionsThatDoNotFitAndTracesTheirWait(t *testing.T) {
	tr := &TraceRecorder{}
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(24), Duration: 90 * time.Second,
		Arms: mustArms(t, "cost"), FreshReplicas: true, Seed: 1, Trace: tr,
		Admission: config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: 10 * time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	if res.Failed() || res.Requests == 0 {
		t.Fatalf("run failed or answered nothing: %+v", res)
	}
	win := tr.Find(24, "cost")
	if win == nil || len(win.Polls) == 0 {
		t.Fatal("no trace of the window")
	}
	var parked, parkedAtClose int
	for _, r := range win.Requests {
		if r.Parked > 0 && !r.Cut {
			parked++
		}
		if r.Cut && r.Kind == "parked" {
			parkedAtClose++
		}
	}
	// 24 sessions of ~11k tokens, room for 3 a replica: 12 wait at first.
	if parked+parkedAtClose < 12 {
		t.Fatalf("%d requests waited at the warden (%d still parked at the close), want at least 12", parked, parkedAtClose)
	}
	dir := t.TempDir()
	if err := tr.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{TracePollsCSV, TraceRequestsCSV, TraceSummary, "queues_24_cost.svg", "ttft_24_cost.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("trace file %s: %v", f, err)
		}
	}
}

func TestBigWorkloadSessionsAreAbout58kTokens(t *testing.T) {
	shape, err := ParseWorkload("big")
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorkloadShape(1, shape)
	c := NewConversation(w.Session(0))
	var last int
	for !c.Done() {
		msgs := c.Next()
		last = len(nextPrompt(w.System, nil, msgs))
		c.Reply("ok")
	}
	if last < 55_000 || last > 65_000 {
		t.Fatalf("last turn's prompt %d tokens, want about 58k-62k", last)
	}
	if _, err := ParseWorkload("huge"); err == nil {
		t.Fatal("unknown workload accepted")
	}
}
