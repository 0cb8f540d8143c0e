package l7_test

import (
	"github.com/lmwarden/lmwarden/internal/testutil"
	"log/slog"
	"net"
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
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// TestKernelCarriesAReplicaInAnotherNetworkNamespace runs the replica as a
// container would: a process in a network namespace of its own, reached
// over a veth pair (no NAT). lmw_pair sees its accepted socket (cgroups
// do not follow network namespaces), and lmw_reply carries its answers
// across the namespaces, straight to the client socket.
func TestKernelCarriesAReplicaInAnotherNetworkNamespace(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	p := mustKernel(t, maps.ModeMsg)
	rp := startReplicaInNetns(t, "10.77.0.1/24", "10.77.0.2/24")
	m := l7.MustModel(t, l7.ModelConfig("http://"+rp.addr))
	_, addr := l7.MustShim(t, m, kernelOptions(p))
	c := l7.MustDial(t, addr)
	for i := range 3 {
		req, want := streamRequest("netns", 20000, 64, 100, time.Millisecond)
		c.Send(t, req)
		resp, body := c.Response(t)
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: status %d, %d bytes of %d", i, resp.StatusCode, len(body), len(want))
		}
	}
	l7.WaitInFlight(t, m) // the exchanges' own counts are done
	checkShare(t, p)
}

// TestKernelSaysWhyAReplicaDoesNotPairAndFallsBack attaches lmw_pair to a
// cgroup the replica is not in (as when it runs outside the hierarchy the
// warden sees, or behind NAT, where its socket's addresses are not the
// warden's connection's): its socket does not pair, the warden logs why
// once, and the responses cross userspace, whole.
func TestKernelSaysWhyAReplicaDoesNotPairAndFallsBack(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	root, err := maps.CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.MkdirTemp(root, "lmwarden-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(cg) })
	var logs testutil.Buffer // the shim logs from its goroutines
	dir := kerneltest.PinDir(t)
	p, err := kernel.Load(kernel.Options{Dir: dir, Mode: maps.ModeMsg, Cgroup: cg,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		maps.Unload(maps.Options{Dir: dir})
	})
	rp := startReplicaProcess(t)
	m := l7.MustModel(t, l7.ModelConfig("http://"+rp.addr))
	_, addr := l7.MustShim(t, m, kernelOptions(p))
	c := l7.MustDial(t, addr)
	for i := range 3 {
		req, want := streamRequest("unpaired", 20000, 64, 100, 0)
		c.Send(t, req)
		resp, body := c.Response(t)
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: status %d, %d bytes of %d", i, resp.StatusCode, len(body), len(want))
		}
	}
	if n := strings.Count(logs.String(), "did not pair"); n != 1 {
		t.Errorf("the warden said %d times that the replica's socket did not pair, want once:\n%s", n, logs.String())
	}
	for k, cnt := range kernelCounts(p) {
		if cnt.KernelBytes != 0 || cnt.UserDown == 0 {
			t.Errorf("replica %v: %+v, want every response byte through userspace", k, cnt)
		}
	}
	l7.WaitInFlight(t, m)
}

// startReplicaInNetns starts the replica process in a network namespace of
// its own, joined to this one by a veth pair: this end gets here, the far
// end there (both CIDR).
func startReplicaInNetns(tb testing.TB, here, there string) replicaProcess {
	tb.Helper()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lmwh0"}, PeerName: "lmwc0"}
	if err := netlink.LinkAdd(veth); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { netlink.LinkDel(veth) })
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReplicaProcess$")
	cmd.Env = append(os.Environ(), replicaProcessEnv+"=1", replicaNetnsEnv+"="+there)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	cmd.Stderr = os.Stderr
	out := testutil.StartChild(tb, cmd)
	peer, err := netlink.LinkByName("lmwc0")
	if err != nil {
		tb.Fatal(err)
	}
	if err := netlink.LinkSetNsPid(peer, cmd.Process.Pid); err != nil {
		tb.Fatal(err)
	}
	addr, err := netlink.ParseAddr(here)
	if err != nil {
		tb.Fatal(err)
	}
	if err := netlink.AddrAdd(veth, addr); err != nil {
		tb.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		tb.Fatal(err)
	}
	line, err := out.ReadString('\n')
	if err != nil {
		tb.Fatalf("replica process in its namespace: %v", err)
	}
	return replicaProcess{addr: strings.TrimSpace(strings.TrimPrefix(line, "listening ")), pid: cmd.Process.Pid}
}

// joinNetnsPeer, in the replica's own namespace, waits for the veth end
// to arrive, gives it cidr, brings it up, and returns the address to
// listen on.
func joinNetnsPeer(tb testing.TB, cidr string) string {
	tb.Helper()
	var link netlink.Link
	testutil.Eventually(tb, 10*time.Second, "the veth end to arrive", func() bool {
		var err error
		link, err = netlink.LinkByName("lmwc0")
		return err == nil
	})
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		tb.Fatal(err)
	}
	lo, _ := netlink.LinkByName("lo")
	for _, l := range []netlink.Link{lo, link} {
		if err := netlink.LinkSetUp(l); err != nil {
			tb.Fatal(err)
		}
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort(addr.IP.String(), "0")
}
