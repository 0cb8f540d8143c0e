package maps

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

// requireBPF skips a test that needs root and a BPF-capable kernel; with
// LMWARDEN_REQUIRE_BPF=1 (CI) the skip is a failure instead.
func requireBPF(tb testing.TB) {
	tb.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root"
	} else if err := checkBPFFS("/sys/fs/bpf"); err != nil {
		why = err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("LMWARDEN_REQUIRE_BPF") == "1" {
		tb.Fatalf("BPF required (LMWARDEN_REQUIRE_BPF=1): %s", why)
	}
	tb.Skip(why)
}

const netnsEnv = "LMWARDEN_TEST_NETNS"

// inNetNS runs the calling test alone in a fresh network namespace with
// loopback up: the parent re-executes the test binary for this one test
// under CLONE_NEWNET (so every thread, not just one, is inside) and returns
// false; the child returns true and runs the body.
func inNetNS(t *testing.T) bool {
	t.Helper()
	requireBPF(t)
	if os.Getenv(netnsEnv) == t.Name() {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		return true
	}
	args := []string{"-test.run", "^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || testing.Verbose() {
		t.Logf("in its own netns:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("test in netns: %v", err)
	}
	if bytes.Contains(out.Bytes(), []byte("--- SKIP")) {
		t.Skip("skipped inside the netns")
	}
	return false
}

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
