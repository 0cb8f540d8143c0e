package maps

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/internal/testnet"
)

// skLookupCtx is the kernel's struct bpf_sk_lookup (uapi), the context
// BPF_PROG_TEST_RUN takes for an sk_lookup program.
type skLookupCtx struct {
	Cookie         uint64
	Family         uint32
	Protocol       uint32
	RemoteIP4      uint32
	RemoteIP6      [4]uint32
	RemotePort     uint16
	_              uint16
	LocalIP4       uint32
	LocalIP6       [4]uint32
	LocalPort      uint32
	IngressIfindex uint32
	_              uint32
}

func ip4(s string) uint32 {
	b := netip.MustParseAddr(s).As4()
	return binary.NativeEndian.Uint32(b[:])
}

func TestDispatchProgramUnderTestRun(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	shim := testnet.Listen(t, "127.0.0.1:0")
	if err := s.AddFrontend(netip.MustParseAddrPort("127.0.0.1:8000"), shim, false); err != nil {
		t.Fatal(err)
	}
	want, err := Cookie(shim)
	if err != nil {
		t.Fatal(err)
	}
	run := func(port uint32) (uint32, uint64) {
		in := skLookupCtx{Family: unix.AF_INET, Protocol: unix.IPPROTO_TCP,
			RemoteIP4: ip4("127.0.0.1"), RemotePort: bits.ReverseBytes16(40000), // network order
			LocalIP4: ip4("127.0.0.1"), LocalPort: port}
		var out skLookupCtx
		ret, err := s.objs.dispatch.Run(&ebpf.RunOptions{Context: in, ContextOut: &out})
		if err != nil {
			t.Fatalf("BPF_PROG_TEST_RUN sk_lookup: %v", err)
		}
		return ret, out.Cookie
	}
	if ret, cookie := run(8000); ret != 1 || cookie != want {
		t.Errorf("frontend port: verdict %d cookie %d, want SK_PASS with the shim's socket %d", ret, cookie, want)
	}
	if ret, cookie := run(8001); ret != 1 || cookie != 0 {
		t.Errorf("other port: verdict %d cookie %d, want SK_PASS with no socket", ret, cookie)
	}
	// The warden's own connection to the frontend's {address, port} (a
	// replica listening there) is left alone.
	own := OwnConnKey(netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"))
	if err := s.RegisterOwnConn(own, OwnConn{Cookie: 1}); err != nil {
		t.Fatal(err)
	}
	if ret, cookie := run(8000); ret != 1 || cookie != 0 {
		t.Errorf("own connection: verdict %d cookie %d, want SK_PASS with no socket", ret, cookie)
	}
	if err := s.ForgetOwnConn(own); err != nil {
		t.Fatal(err)
	}
	shim.Close()
	if ret, cookie := run(8000); ret != 1 || cookie != 0 {
		t.Errorf("shim gone: verdict %d cookie %d, want SK_PASS with no socket (fail-open)", ret, cookie)
	}
	ds, err := s.DispatchStats()
	if err != nil {
		t.Fatal(err)
	}
	if want := (DispatchStats{Lookups: 4, Own: 1, Misses: 1, NoListener: 1, Assigned: 1}); ds != want {
		t.Errorf("dispatch counters %+v, want %+v", ds, want)
	}
}

// TestVerdictProgramTestRunIsUnsupported pins a measured fact: this
// kernel's sk_skb programs have no BPF_PROG_TEST_RUN, which is why the
// verdict is tested through real sockets. It fails the day that changes,
// so that the verdict gets direct tests then.
func TestVerdictProgramTestRunIsUnsupported(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	_, err := s.objs.verdict.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err == nil {
		t.Fatal("BPF_PROG_TEST_RUN now runs sk_skb programs: test the verdict directly with it, and drop this test")
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		t.Fatalf("sk_skb BPF_PROG_TEST_RUN failed otherwise than unsupported (the guard no longer says what it did): %v", err)
	}
}
