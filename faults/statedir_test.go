package faults

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/maps"
)

// The pinned state's directory and lock, attacked by an unprivileged
// user on a bpffs whose root is mode 1777 (as scripts/deps.sh and most
// hosts mount it).

// sharedParent is a directory of mode 1777 on bpffs, like /sys/fs/bpf
// itself, in which a test's warden keeps its state at parent/lmwarden.
func sharedParent(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join("/sys/fs/bpf", fmt.Sprintf("lmwarden-faults-shared-%d", os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, 0o777|os.ModeSticky); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: filepath.Join(p, "lmwarden")}); err != nil {
			tb.Logf("unload: %v", err)
		}
		os.RemoveAll(p)
	})
	return p
}

// readyWithin waits until the warden is ready (true) or has exited
// (false), and says how long that took; neither within d fails the test.
func readyWithin(t *testing.T, w *warden, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	ready := false
	testutil.Eventually(t, d, "the warden to become ready or exit", func() bool {
		if !w.running() {
			return true
		}
		code, err := (&httpClient{timeout: time.Second}).get("http://" + adminAddr + "/readyz")
		ready = err == nil && code == http.StatusOK
		return ready
	})
	return ready, time.Since(start)
}

// lockedElsewhere reports whether another process holds an flock on path
// (a shared lock of ours would not be granted).
func lockedElsewhere(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// TestParentLockDoesNotHangTheWarden: nobody holds an flock on the shared
// parent (`flock /sys/fs/bpf sleep 60`); the warden must start anyway,
// on a kernel datapath: it never locks the shared parent.
func TestParentLockDoesNotHangTheWarden(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	parent := sharedParent(t)
	holder := startCmd(t, "nobody's flock", asNobody("flock", parent, "sleep", "60"))
	testutil.Eventually(t, 10*time.Second, "nobody's flock to hold the parent", func() bool { return lockedElsewhere(t, parent) })
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Replicas: 2, Datapath: "auto", PinDir: filepath.Join(parent, "lmwarden"), NoWait: true})
	ok, took := readyWithin(t, w, 15*time.Second)
	dp := datapathLine(w.out.String())
	figure(t, "nobody holds flock on the shared parent: warden ready %v after %v, %s", ok, took.Round(time.Millisecond), dp)
	if !ok {
		t.Errorf("the warden was not ready within 15 s while nobody locked the parent:\n%s", w.out.String())
	}
	if !strings.Contains(dp, "datapath: msg") {
		t.Errorf("want the kernel datapath msg, got %q", dp)
	}
	syscall.Kill(-holder.pid(), syscall.SIGKILL)
}

// datapathLine is the warden's log line that says which datapath runs.
func datapathLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="datapath: `) {
			return l
		}
	}
	return "(no datapath line)"
}

// TestStateDirectoryOfAnotherUserIsRefused: nobody creates the state
// directory before the warden's first start. The warden must not build
// its state in a directory another user owns: an explicit kernel
// datapath fails with an error that says so, auto falls back to user
// and logs why.
func TestStateDirectoryOfAnotherUserIsRefused(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	parent := sharedParent(t)
	dir := filepath.Join(parent, "lmwarden")
	if out, err := asNobody("mkdir", "-m", "0755", dir).CombinedOutput(); err != nil {
		t.Fatalf("nobody's mkdir: %v: %s", err, out)
	}
	startReplicas(t, 2, replicaOpts{})

	w := startWarden(t, wardenOpts{Replicas: 2, Datapath: "msg", PinDir: dir, NoWait: true})
	ok, took := readyWithin(t, w, 15*time.Second)
	var deleted string
	if ok {
		// What nobody can do to a state built in its directory.
		out, err := asNobody("rm", "-f", filepath.Join(dir, "lmw_hash_key"), filepath.Join(dir, "link_dispatch")).CombinedOutput()
		deleted = fmt.Sprintf("nobody's rm of lmw_hash_key and link_dispatch: err %v %s", err, strings.TrimSpace(string(out)))
		w.signal(t, 15)
		w.wait(t, 30*time.Second)
		w.opts.NoWait = true
		w.restart(t)
		again, _ := readyWithin(t, w, 15*time.Second)
		deleted += fmt.Sprintf("; the next start ready %v: %s", again, lastError(w.out.String()))
		w.signal(t, 9)
		w.wait(t, 10*time.Second)
	} else {
		w.wait(t, 10*time.Second)
	}
	figure(t, "a state directory made by nobody, --datapath msg: ready %v after %v; %s; log: %s", ok, took.Round(time.Millisecond), deleted, lastError(w.out.String()))
	if ok {
		t.Errorf("the warden used a state directory nobody owns")
	} else if log := w.out.String(); !strings.Contains(log, "owned by uid 65534") {
		t.Errorf("the refusal does not name the owner:\n%s", log)
	}

	wa := startWarden(t, wardenOpts{Replicas: 2, Datapath: "auto", PinDir: dir, NoWait: true})
	ok, _ = readyWithin(t, wa, 15*time.Second)
	dp := datapathLine(wa.out.String())
	figure(t, "the same with --datapath auto: ready %v, %s", ok, dp)
	if !ok || !strings.Contains(dp, "datapath: user") || !strings.Contains(wa.out.String(), "owned by uid 65534") {
		t.Errorf("auto: ready %v, %q; want the user datapath and the reason logged:\n%s", ok, dp, wa.out.String())
	}
}

// lastError is the last log line at level ERROR or WARN, or the last line.
func lastError(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "level=ERROR") || strings.Contains(lines[i], "level=WARN") || strings.HasPrefix(lines[i], "lmwarden") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// TestLockedStateNamesItsHolder: a second warden on the same state gives
// up after the lock timeout and says who holds it.
func TestLockedStateNamesItsHolder(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Replicas: 2, Datapath: "msg"})
	second := startProc(t, "second warden", "serve", "--config", w.config, "--datapath", "msg", "--pin-dir", w.opts.PinDir, "--admin", "127.0.0.1:9101", "--listen", "127.0.0.1:8001",
		"--admin-token-file", filepath.Join(t.TempDir(), "admin.token"))
	start := time.Now()
	err := second.wait(t, 60*time.Second)
	took := time.Since(start)
	msg := lastError(second.out.String())
	figure(t, "a second warden on a held state: exit %v after %v: %s", err, took.Round(time.Millisecond), msg)
	if want := fmt.Sprintf("pid %d", w.pid()); !strings.Contains(second.out.String(), want) {
		t.Errorf("the second warden's error does not name the holder (%s):\n%s", want, second.out.String())
	}
}
