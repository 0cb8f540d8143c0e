// Package mapstest is test support for everything that loads the real BPF
// programs: it tells whether this machine can (root and bpffs), and runs a
// test alone in a fresh network namespace, as every BPF test must.
package mapstest

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RequireBPF skips a test that needs root and bpffs at /sys/fs/bpf; with
// LMWARDEN_REQUIRE_BPF=1 (CI) the skip is a failure instead, so BPF tests
// can never pass by not running.
func RequireBPF(tb testing.TB) {
	tb.Helper()
	why := ""
	var st unix.Statfs_t
	if os.Geteuid() != 0 {
		why = "needs root"
	} else if err := unix.Statfs("/sys/fs/bpf", &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		why = "no bpffs at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)"
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

// InNetNS runs the calling test alone in a fresh network namespace with
// loopback up: the parent re-executes the test binary for this one test
// under CLONE_NEWNET (so every thread, not just one, is inside) and returns
// false; the child returns true and runs the body. Child processes the body
// starts share its namespace. A fuzz target's seed corpus runs the same
// way; a fuzzing run (-test.fuzz) runs where it is started: start it in a
// namespace of its own (unshare -n).
func InNetNS(t testing.TB) bool {
	t.Helper()
	RequireBPF(t)
	fuzzing := false
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		fuzzing = true
	}
	if fuzzing || os.Getenv(netnsEnv) == t.Name() {
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
	if why, skipped := skippedInside(out.String(), t.Name()); skipped {
		t.Skipf("skipped inside the netns: %s", why)
	}
	return false
}

// skippedInside reports whether the test name itself (not only some of
// its subtests) skipped in the child's -test.v output, and why: the lines
// it logged after its RUN line (a subtest's SKIP line comes after its
// parent's result, not after what it logged).
func skippedInside(out, name string) (why string, skipped bool) {
	lines := strings.Split(out, "\n")
	skip := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "--- SKIP: "+name+" (") })
	if skip < 0 {
		return "", false
	}
	var logged []string
	if run := slices.Index(lines, "=== RUN   "+name); run >= 0 {
		for _, l := range lines[run+1 : skip] {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") || len(logged) == 5 {
				break
			}
			if l != "" {
				logged = append(logged, l)
			}
		}
	}
	return strings.Join(logged, "; "), true
}

// Inside reports whether this process is a test binary that InNetNS
// re-executed (a suite that re-runs others can skip itself there).
func Inside() bool { return os.Getenv(netnsEnv) != "" }
