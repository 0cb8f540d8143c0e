package maps

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
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
	if _, err := os.Stat(dir + "/" + pinVerdictLink); err != nil {
		t.Fatalf("state not built in place: %v", err)
	}
}
