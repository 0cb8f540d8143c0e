package l7

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
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/maps"
)

// requireBPF skips a test that needs root and a BPF-capable kernel; with
// LMWARDEN_REQUIRE_BPF=1 (CI) the skip is a failure instead.
func requireBPF(tb testing.TB) {
	tb.Helper()
	why := ""
	var st unix.Statfs_t
	if os.Geteuid() != 0 {
		why = "needs root"
	} else if err := unix.Statfs("/sys/fs/bpf", &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		why = "no bpffs at /sys/fs/bpf"
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
// under CLONE_NEWNET (every thread of it inside) and returns false; the
// child returns true and runs the body.
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
	cmd := exec.Command(os.Args[0], "-test.run", "^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
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

// mustKernelPath loads fresh pinned state (unloaded when the test ends)
// and returns a kernel datapath over it.
func mustKernelPath(tb testing.TB) *KernelPath {
	tb.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("lmwarden-l7test-%d", os.Getpid()))
	os.RemoveAll(dir)
	st, err := maps.Load(maps.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	k := NewKernelPath(st)
	tb.Cleanup(func() {
		k.Close()
		st.Close()
		if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
			tb.Error(err)
		}
	})
	return k
}

// suiteDatapathEnv, when "kernel", makes every shim built with a nil
// Datapath use one kernel datapath over state pinned at suiteDirEnv.
const (
	suiteDatapathEnv = "LMWARDEN_TEST_DATAPATH"
	suiteDirEnv      = "LMWARDEN_TEST_PIN_DIR"
)

func init() {
	if os.Getenv(suiteDatapathEnv) != "kernel" {
		return
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		panic(err)
	}
	st, err := maps.Load(maps.Options{Dir: os.Getenv(suiteDirEnv)})
	if err != nil {
		panic(err)
	}
	k := NewKernelPath(st)
	defaultDatapath = func() Datapath { return k }
}
