// Package kerneltest is test support for everything that loads the real
// BPF programs through package maps: fresh pinned state per test, pinned
// under a temporary directory of bpffs and unloaded when the test ends.
// Run such tests in a network namespace of their own (maps/mapstest).
package kerneltest

import (
	"os"
	"testing"

	"github.com/lmwarden/lmwarden/maps"
)

// State loads fresh pinned state under a new temporary directory of
// /sys/fs/bpf; the test's cleanup unloads it (links detached, pins removed).
func State(tb testing.TB) *maps.State {
	tb.Helper()
	dir := PinDir(tb)
	st, err := maps.Load(maps.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		st.Close()
		if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
			tb.Error(err)
		}
	})
	return st
}

// PinDir returns the path of a directory on bpffs that does not exist yet
// (maps.Load creates it atomically) and is removed when the test ends.
func PinDir(tb testing.TB) string {
	tb.Helper()
	parent, err := os.MkdirTemp("/sys/fs/bpf", "lmwarden-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(parent) })
	return parent + "/state"
}
