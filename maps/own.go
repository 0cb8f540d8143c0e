package maps

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/bpf"
)

// OwnConnKey is the lmw_own_conns key of a connection from src (the
// warden's end) to dst, as sk_lookup and sock_ops see its packets: an
// IPv4-mapped IPv6 address counts as IPv4 (such a socket sends IPv4).
func OwnConnKey(src, dst netip.AddrPort) ConnKey {
	var k ConnKey
	k.Sport, k.Dport = src.Port(), dst.Port()
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if s.Is4() && d.Is4() {
		k.Family = unix.AF_INET
		a, b := s.As4(), d.As4()
		k.Src[0] = binary.NativeEndian.Uint32(a[:]) // network order bytes
		k.Dst[0] = binary.NativeEndian.Uint32(b[:])
		return k
	}
	k.Family = unix.AF_INET6
	a, b := s.As16(), d.As16()
	for i := range 4 {
		k.Src[i] = binary.NativeEndian.Uint32(a[4*i:])
		k.Dst[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return k
}

// RegisterOwnConn records a connection of the warden's own (to a replica,
// or polling one) before it connects: sk_lookup leaves it alone, so it
// reaches the replica's listener even on a frontend's {address, port}.
func (s *State) RegisterOwnConn(k ConnKey, v OwnConn) error {
	return s.objs.LmwOwnConns.Update(&k, &v, ebpf.UpdateAny)
}

// ForgetOwnConn removes a closed connection's entry; unknown is not an error.
func (s *State) ForgetOwnConn(k ConnKey) error {
	err := s.objs.LmwOwnConns.Delete(&k)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// OwnConns counts the registered connections (for leak checks).
func (s *State) OwnConns() (int, error) {
	n := 0
	var k ConnKey
	var v OwnConn
	it := s.objs.LmwOwnConns.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// DispatchStats are the sk_lookup program's counters, summed over CPUs.
type DispatchStats struct {
	Lookups       uint64 // TCP connection attempts it saw
	Own           uint64 // the warden's own connections, left alone
	Misses        uint64 // no frontend at that {address, port}
	NoListener    uint64 // a frontend whose shim is gone: failed open
	Assigned      uint64 // steered to the shim
	FailedAssigns uint64 // bpf_sk_assign refused: failed open
}

// DispatchStats reads lmw_dispatch_stats.
func (s *State) DispatchStats() (DispatchStats, error) {
	var c [bpf.LmwardenDispatchOutcomeDISPATCH_OUTCOMES]uint64
	if err := sumCounters(s.objs.LmwDispatchStats, c[:]); err != nil {
		return DispatchStats{}, err
	}
	return DispatchStats{Lookups: c[0], Own: c[1], Misses: c[2], NoListener: c[3], Assigned: c[4], FailedAssigns: c[5]}, nil
}

// sumCounters reads a per-CPU array of counters, one per key, into out.
func sumCounters(m *ebpf.Map, out []uint64) error {
	for k := range out {
		var per []uint64
		if err := m.Lookup(uint32(k), &per); err != nil {
			return err
		}
		for _, v := range per {
			out[k] += v
		}
	}
	return nil
}
