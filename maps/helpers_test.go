package maps

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// inNetNS: see package mapstest (shared by every package whose tests load
// the real programs).
func inNetNS(t *testing.T) bool { t.Helper(); return mapstest.InNetNS(t) }

// mustState loads a fresh pinned state in a directory of its own and
// unloads it when the test ends.
func mustState(tb testing.TB) *State {
	tb.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("lmwarden-test-%d", os.Getpid()))
	os.RemoveAll(dir)
	s, err := Load(Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		if err := Unload(Options{Dir: dir}); err != nil {
			tb.Error(err)
		}
	})
	return s
}
