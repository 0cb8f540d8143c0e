package l7_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// suiteDatapathEnv, when set to a kernel datapath's mode ("msg", "skb"),
// makes every shim built with a nil Datapath use that datapath over state
// pinned at suiteDirEnv, and every pool such a shim makes dial with its
// registering (and, for msg, pairing) dialer.
const (
	suiteDatapathEnv = "LMWARDEN_TEST_DATAPATH"
	suiteDirEnv      = "LMWARDEN_TEST_PIN_DIR"
	// suiteUnpairedMark starts the line a suite run prints, instead of
	// running, over msg on a kernel that does not pair its connections.
	suiteUnpairedMark = "LMWARDEN-SUITE-UNPAIRED: "
)

func init() {
	mode := os.Getenv(suiteDatapathEnv)
	if mode == "" {
		return
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		panic(err)
	}
	p, err := kernel.Load(kernel.Options{Dir: os.Getenv(suiteDirEnv), Mode: maps.Mode(mode)})
	if err != nil {
		panic(err)
	}
	if err := p.ProbePairing(); errors.Is(err, kernel.ErrUnpaired) {
		fmt.Println(suiteUnpairedMark + err.Error()) // the parent skips this datapath, saying why
		os.Exit(0)
	} else if err != nil {
		panic(err)
	}
	l7.SetTestDefaults(func() datapath.Datapath { return p.Datapath }, p.Upstreams.DialTCP)
}

// TestShimSuiteOverKernelDatapaths runs every other test of this package
// again, once per kernel datapath, each time in a network namespace of
// its own, with that datapath as the shims' default: the routing suite
// must pass with every datapath. Skipped over sk_skb: the replay of a
// request whose pooled connection the replica closed unanswered (that
// datapath's kernel carried the body, so the shim cannot send it again;
// docs/kernel.md, "The sk_skb datapath").
func TestShimSuiteOverKernelDatapaths(t *testing.T) {
	mapstest.RequireBPF(t)
	if os.Getenv(suiteDatapathEnv) != "" || mapstest.Inside() {
		t.Skip("inside a suite run")
	}
	for _, mode := range []maps.Mode{maps.ModeMsg, maps.ModeSkb} {
		t.Run(string(mode), func(t *testing.T) {
			dir := kerneltest.PinDir(t)
			t.Cleanup(func() {
				if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
					t.Error(err)
				}
			})
			skip := "Kernel|TestShimSuiteOverKernelDatapaths"
			if mode == maps.ModeSkb {
				skip += "|TestPooledConnectionClosedUnansweredIsReplayedOnce"
			}
			args := []string{"-test.run", "^Test", "-test.timeout", suiteTimeout(), "-test.skip", skip, "-test.count=1"}
			if testing.Short() {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), suiteDatapathEnv+"="+string(mode), suiteDirEnv+"="+dir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
			out, err := cmd.CombinedOutput()
			if i := bytes.Index(out, []byte(suiteUnpairedMark)); err == nil && i >= 0 {
				why, _, _ := strings.Cut(string(out[i+len(suiteUnpairedMark):]), "\n")
				t.Skipf("msg on this kernel: %s; its self-test refuses it (docs/kernel.md, \"Kernels tested\")", why)
			}
			if err != nil {
				t.Fatalf("shim suite over the %s datapath: %v\n%s", mode, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// suiteTimeout bounds one run of the suite: 5m, or
// LMWARDEN_SUITE_TIMEOUT (`make kernels` runs it in VMs under emulation,
// several times slower).
func suiteTimeout() string {
	if d := os.Getenv("LMWARDEN_SUITE_TIMEOUT"); d != "" {
		return d
	}
	return "5m"
}

// mustKernel loads a kernel datapath over fresh pinned state, unloaded
// when the test ends.
func mustKernel(tb testing.TB, mode maps.Mode) *kernel.Path {
	tb.Helper()
	dir := kerneltest.PinDir(tb)
	p, err := kernel.Load(kernel.Options{Dir: dir, Mode: mode})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Close()
		if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
			tb.Error(err)
		}
	})
	skipUnpaired(tb, p)
	return p
}

// skipUnpaired skips a test of the msg datapath, saying why, on a kernel
// that does not pair the warden's connections (msg's self-test refuses it
// there: kernel.Path.ProbePairing); another failure of the probe fails it.
func skipUnpaired(tb testing.TB, p *kernel.Path) {
	tb.Helper()
	if err := p.ProbePairing(); errors.Is(err, kernel.ErrUnpaired) {
		tb.Skipf("msg on this kernel: %v; its self-test refuses it (docs/kernel.md, \"Kernels tested\")", err)
	} else if err != nil {
		tb.Fatal(err)
	}
}

// kernelOptions are the shim options of a kernel datapath: the datapath,
// and a pool that dials with its dialer.
func kernelOptions(p *kernel.Path) l7.Options {
	u := l7.NewUpstreams(3*time.Second, 4*time.Second, 32)
	u.SetDial(p.Upstreams.DialTCP)
	o := l7.Options{Datapath: p.Datapath, Upstreams: u}
	if os.Getenv("LMWARDEN_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

// kernelCounts are the path's counters.
func kernelCounts(p *kernel.Path) map[datapath.ReplicaKey]kernel.Counts {
	return p.Datapath.(interface {
		Counts() map[datapath.ReplicaKey]kernel.Counts
	}).Counts()
}

// forEachKernel runs body once per kernel datapath, each in a namespace
// of its own.
func forEachKernel(t *testing.T, body func(t *testing.T, p *kernel.Path)) {
	for _, mode := range []maps.Mode{maps.ModeMsg, maps.ModeSkb} {
		t.Run(string(mode), func(t *testing.T) {
			if !mapstest.InNetNS(t) {
				return
			}
			body(t, mustKernel(t, mode))
		})
	}
}
