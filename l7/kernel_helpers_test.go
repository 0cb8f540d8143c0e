package l7

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmwarden/lmwarden/maps/mapstest"

	"github.com/vishvananda/netlink"

	"github.com/lmwarden/lmwarden/maps"
)

// requireBPF and inNetNS: see package mapstest (shared by every package
// whose tests load the real programs).
func requireBPF(tb testing.TB) { tb.Helper(); mapstest.RequireBPF(tb) }

func inNetNS(t *testing.T) bool { t.Helper(); return mapstest.InNetNS(t) }

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
