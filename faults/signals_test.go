package faults

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// TestStraySignalsDoNotKillTheWarden, on every datapath: SIGHUP reloads
// the configuration while streams are in flight (a changed policy is
// applied, a change that needs a restart is named, a broken file is
// refused with the running configuration kept), SIGPIPE is ignored, and
// through all of it the warden keeps running and no stream is cut.
func TestStraySignalsDoNotKillTheWarden(t *testing.T) {
	for _, dp := range wardenDatapaths {
		t.Run(dp, func(t *testing.T) { straySignals(t, dp) })
	}
}

func straySignals(t *testing.T, dp string) {
	if !inNetNS(t) {
		return
	}
	startReplicas(t, 4, replicaOpts{Speed: 20, ReplyTokens: 600})
	w := startWarden(t, wardenOpts{Datapath: dp})
	stop := make(chan struct{})
	lr := load(4, 600, "hup", stop)
	waitStreaming(t, lr, 2)
	logged := func(what, s string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, func() bool {
			if !w.running() {
				t.Fatalf("the warden exited: %v", w.err)
			}
			return strings.Count(w.out.String(), s) > 0
		})
	}
	// The file as it is: reloaded, nothing changes.
	w.signal(t, syscall.SIGHUP)
	logged("the reload", "configuration reloaded")
	// A policy (applied) and a connection bound (needs a restart).
	w.opts.ModelExtra, w.opts.Extra = "policy: random", "max_connections_per_client: 2000\n"
	writeConfig(t, dirOf(w.config), w.opts)
	w.signal(t, syscall.SIGHUP)
	logged("the policy applied", `setting=policy from=sticky to=random origin=SIGHUP`)
	logged("the restart named", "fields=max_connections_per_client")
	// A file with a mistake: refused, the running configuration kept.
	if err := os.WriteFile(w.config, []byte("models: [ {name: m, colour: blue} ]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.signal(t, syscall.SIGHUP)
	logged("the broken file refused", "configuration not reloaded")
	w.signal(t, syscall.SIGPIPE)
	policy := w.models(t)[0].Policy
	close(stop)
	cut, n := 0, 0
	for _, r := range lr.results() {
		n++
		if !r.Complete {
			cut++
			t.Logf("cut: %v", r)
		}
	}
	alive := w.running()
	figure(t, "%s: SIGHUP three times (the file as it was, a new policy and connection bound, a broken file) and SIGPIPE, %d streams running: warden running %v, policy now %s, %d of %d streams cut",
		dp, n, alive, policy, cut, n)
	if !alive || policy != "random" || cut > 0 {
		t.Errorf("after the signals: running %v, policy %s (want random), %d streams cut", alive, policy, cut)
	}
}

// dirOf is the directory of a path.
func dirOf(path string) string { return path[:strings.LastIndexByte(path, '/')] }
