package maps

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
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

// DispatchStats sums the sk_lookup program's per-CPU counters.
func (s *State) DispatchStats() (DispatchStats, error) {
	var per []DispatchStats
	var sum DispatchStats
	if err := s.objs.LmwDispatchStats.Lookup(uint32(0), &per); err != nil {
		return sum, err
	}
	for _, p := range per {
		sum.Lookups += p.Lookups
		sum.Own += p.Own
		sum.Misses += p.Misses
		sum.NoListener += p.NoListener
		sum.Assigned += p.Assigned
		sum.FailedAssigns += p.FailedAssigns
	}
	return sum, nil
}
