package faults

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// figure logs one measured figure of a test (docs/reliability.md quotes
// them); `go test -v ./faults/ | grep FIGURE` lists them all.
func figure(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Logf("FIGURE %s: %s", tb.Name(), fmt.Sprintf(format, args...))
}

// datapaths are the datapaths a fault test runs on: the userspace one and
// both kernel ones.
var datapaths = []string{"user", "msg", "skb"}

func TestReplicaKilledUnderLoad(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) { replicaFault(t, dp, syscall.SIGKILL) })
	}
}

func TestReplicaStoppedUnderLoad(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) { replicaFault(t, dp, syscall.SIGSTOP) })
	}
}

// replicaFault runs sessions streaming turn after turn through the warden,
// then kills (SIGKILL) or stops (SIGSTOP) one replica while streams are in
// flight on it. Every stream in flight there must end with the API's own
// error event within seconds (a killed replica's at once, a stopped one's
// once the warden has marked it unhealthy), the warden's log must name the
// replica, and every turn that starts after the fault must be served
// whole elsewhere.
func replicaFault(t *testing.T, dp string, sig syscall.Signal) {
	if !inNetNS(t) {
		return
	}
	reps := startReplicas(t, 4, replicaOpts{Speed: 20, ReplyTokens: 1500})
	w := startWarden(t, wardenOpts{Datapath: dp})
	stop := make(chan struct{})
	lr := load(8, 1500, "fault", stop)

	// The victim: a replica with a stream in flight whose response has
	// begun (a request not yet answered would be retried elsewhere).
	victim := -1
	testutil.Eventually(t, 30*time.Second, "a stream begun on a replica", func() bool {
		reps := w.models(t)[0].Replicas
		for _, s := range lr.streams() {
			if victim = w.sessionReplica(t, s); victim >= 0 && reps[victim].InFlight > 0 {
				return true
			}
		}
		return false
	})
	onVictim := w.models(t)[0].Replicas[victim].InFlight
	at := time.Now()
	reps[victim].signal(t, sig)
	// Wait until the streams in flight at the fault have ended (the
	// warden ends a stopped replica's once it has marked it unhealthy:
	// the suite polls every 100 ms, 3 failures of 500 ms) and every
	// session has ended a turn it started after settle: a killed replica
	// refuses connections at once, a stopped one takes placements until
	// it is marked unhealthy, and turns after that must all be served.
	settle := time.Second
	if sig == syscall.SIGSTOP {
		settle = 5 * time.Second
	}
	testutil.Eventually(t, 2*time.Minute, "every session to end a turn begun after the fault settled", func() bool {
		later := map[string]bool{}
		for _, r := range lr.sofar() {
			if r.Start.After(at.Add(settle)) {
				later[r.Session] = true
			}
		}
		return len(later) == 8
	})
	close(stop)
	all := lr.results()
	if sig == syscall.SIGSTOP {
		reps[victim].signal(t, syscall.SIGCONT)
	}

	var hit, clean, cut, later, laterFailed int
	var slowest time.Duration
	for _, r := range all {
		inFlightAtFault := r.Start.Before(at) && r.End.After(at)
		switch {
		case inFlightAtFault && !r.Complete:
			hit++
			took := r.End.Sub(at)
			slowest = max(slowest, took)
			// Ended with an explanation: the API's error event on a stream
			// that had begun, or the warden's own 5xx (with its reason) for
			// a request the replica had not begun to answer, which clients
			// retry.
			if r.ErrEvent != "" || (r.Status >= 500 && r.Events == 0 && r.Err == nil) {
				clean++
			} else {
				cut++
				t.Logf("cut without an error event: %v", r)
			}
		case r.Start.After(at.Add(settle)):
			later++
			if !r.Complete {
				laterFailed++
				t.Logf("a later turn failed: %v", r)
			}
		}
	}
	figure(t, "%v on replica %d with %d streams in flight there: %d streams hit, %d ended with an error event or the warden's 5xx, %d cut, slowest end %v after the fault; %d later turns, %d failed",
		sig, victim, onVictim, hit, clean, cut, slowest.Round(time.Millisecond), later, laterFailed)
	if hit == 0 {
		t.Fatalf("no stream was in flight on replica %d at the fault", victim)
	}
	if cut > 0 {
		t.Errorf("%d of %d streams hit by the fault ended without an error event or a 5xx", cut, hit)
	}
	limit := 3 * time.Second
	if sig == syscall.SIGSTOP {
		limit = 10 * time.Second // unhealthy after ~1.5 s here, then the stall check
	}
	if slowest > limit {
		t.Errorf("the slowest stream hit ended %v after the fault, want within %v", slowest, limit)
	}
	if later == 0 || laterFailed > 0 {
		t.Errorf("%d of %d turns started after the fault failed", laterFailed, later)
	}
	want := fmt.Sprintf("replica=%d", victim)
	if !strings.Contains(w.out.String(), want) || !strings.Contains(w.out.String(), replicaURL(victim)) {
		t.Errorf("the warden's log does not name replica %d (%s)", victim, replicaURL(victim))
	}
}
