package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLoadPinsStateWithPrivateModes(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	fi, err := os.Stat(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(s.Dir())
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
		fi, _ := os.Stat(s.Dir() + "/" + e.Name())
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	for _, want := range []string{"lmw_sessions", "lmw_socks", "lmw_listeners", "lmw_frontends", "lmw_own_conns", "lmw_stats", "lmw_dispatch_stats", "link_dispatch", "link_verdict"} {
		if slices.Contains(s.OlderAttach(), want) {
			t.Logf("%s: no bpf_link for it on this kernel, attached with BPF_PROG_ATTACH", want)
			continue
		}
		if !names[want] {
			t.Errorf("%s not pinned (have %v)", want, names)
		}
	}
	// bpftool lists maps by name: every one of ours says whose it is.
	for name := range names {
		if !strings.HasPrefix(name, "lmw_") && !strings.HasPrefix(name, "link_") {
			t.Errorf("pinned map %s: want the lmw_ prefix", name)
		}
	}
}

func TestSecondWardenIsLockedOut(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	_, err := Load(Options{Dir: s.Dir()})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Load: %v, want ErrLocked", err)
	}
}

func TestSessionSurvivesWardenRestart(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	seen := time.Unix(1_700_000_000, 0)
	if err := s.PutSession(0xfeedbeef, 3, 2, seen); err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	s.Close()
	s2, err := Load(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !s2.Reused {
		t.Error("restarted warden did not adopt the pinned state")
	}
	v, ok, err := s2.LookupSession(0xfeedbeef)
	if err != nil || !ok {
		t.Fatalf("session lost across restart: ok=%v err=%v", ok, err)
	}
	if v.Replica != 3 || v.Model != 2 || v.LastSeenNs != uint64(seen.UnixNano()) {
		t.Errorf("session after restart = %+v", v)
	}
	n := 0
	ReadSessions(dir, func(uint64, Session) bool { n++; return true })
	if n != 1 {
		t.Errorf("ReadSessions saw %d sessions, want 1", n)
	}
}

func TestLoadFillsEmptyDirectoryPreparedByRoot(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t) // a unique dir name, unloaded at the end
	dir := s.Dir()
	s.Close()
	if err := Unload(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil { // what the unit's ExecStartPre does
		t.Fatal(err)
	}
	s2, err := Load(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := os.Stat(dir + "/" + pinDispatchLink); err != nil {
		t.Fatalf("state not built in place: %v", err)
	}
}

// statePath is a state directory that does not exist yet, in a parent of
// mode 1777 like bpffs's root; both go when the test ends.
func statePath(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("/sys/fs/bpf", "lmwarden-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Unload(Options{Dir: parent + "/state"})
		os.RemoveAll(parent)
	})
	return parent + "/state"
}

func TestLoadDoesNotLockTheSharedParent(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	dir := statePath(t)
	// Anyone may open a parent of mode 1777 and hold a lock on it.
	f, err := os.Open(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := Load(Options{Dir: dir})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load waits for a lock on the shared parent")
	}
}

func TestLoadRefusesADirectoryAnotherUserMade(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	for _, tc := range []struct {
		name  string
		setup func(dir string) error
		want  string
	}{
		{"owned by nobody", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chown(dir, 65534, 65534)
		}, "owned by uid 65534"},
		{"mode 0755", func(dir string) error { return os.Mkdir(dir, 0o755) }, "mode 0755"},
		{"a symbolic link", func(dir string) error { return os.Symlink("/sys/fs/bpf", dir) }, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := statePath(t)
			if err := tc.setup(dir); err != nil {
				t.Fatal(err)
			}
			s, err := Load(Options{Dir: dir})
			if err == nil {
				s.Close()
				t.Fatal("Load built its state in a directory that is not its own")
			}
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v; want ErrUnsafe saying %q", err, tc.want)
			}
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
				return // the link: nothing of ours may be behind it either, but others' things are
			}
			if ents, _ := os.ReadDir(dir); len(ents) > 0 {
				t.Errorf("Load left %d entries in the refused directory", len(ents))
			}
		})
	}
}

func TestLoadRefusesAParentOthersMayRenameIn(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	dir := statePath(t)
	if err := os.Chmod(filepath.Dir(dir), 0o777); err != nil { // no sticky bit
		t.Fatal(err)
	}
	if s, err := Load(Options{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("Load accepted a parent where anyone may rename its directory away")
	} else if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "sticky") {
		t.Fatalf("Load: %v; want ErrUnsafe about the sticky bit", err)
	}
}

func TestLockTimeoutNamesTheHolder(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	start := time.Now()
	_, err := Load(Options{Dir: s.Dir(), LockTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Load: %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("gave up after %v, before the lock timeout", waited)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("%v: does not name the holder (%s)", err, want)
	}
	// Unload waits for the lock the same way.
	if err := Unload(Options{Dir: s.Dir(), LockTimeout: -1}); !errors.Is(err, ErrLocked) {
		t.Errorf("Unload of a held state: %v, want ErrLocked", err)
	}
}
