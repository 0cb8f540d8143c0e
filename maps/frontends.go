package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// frontendKey builds the sk_lookup key for ap; an unspecified address is
// the wildcard for its port.
func frontendKey(ap netip.AddrPort) FrontendKey {
	var k FrontendKey
	k.Port = ap.Port()
	a := ap.Addr().Unmap()
	if a.Is4() {
		k.Family = unix.AF_INET
		b := a.As4()
		k.Addr[0] = binary.NativeEndian.Uint32(b[:]) // network order bytes, as local_ip4
		return k
	}
	k.Family = unix.AF_INET6
	b := a.As16()
	for i := range 4 {
		k.Addr[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return k
}

func keyAddrPort(k FrontendKey) netip.AddrPort {
	if k.Family == unix.AF_INET {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], k.Addr[0])
		return netip.AddrPortFrom(netip.AddrFrom4(b), k.Port)
	}
	var b [16]byte
	for i := range 4 {
		binary.NativeEndian.PutUint32(b[4*i:], k.Addr[i])
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b), k.Port)
}

// AddFrontend dispatches connections to ap to the listening socket ln.
// With addAddr, a specific address not yet on any interface is added to lo
// (and removed again by RemoveFrontend or Unload). ln must not be MPTCP.
func (s *State) AddFrontend(ap netip.AddrPort, ln syscall.Conn, addAddr bool) error {
	key := frontendKey(ap)
	var old FrontendValue
	if err := s.objs.LmwFrontends.Lookup(&key, &old); err == nil {
		// A stale entry from a previous warden: its listener is gone, so
		// reuse the slot (and keep its address ownership).
		return s.setListener(ap, key, old, ln)
	}
	slot, err := s.freeSlot()
	if err != nil {
		return err
	}
	v := FrontendValue{Slot: slot}
	if addAddr && !ap.Addr().IsUnspecified() {
		added, err := addLoopbackAddr(ap.Addr())
		if err != nil {
			return err
		}
		if added {
			v.Flags |= FrontendOwnAddr
		}
	}
	return s.setListener(ap, key, v, ln)
}

func (s *State) setListener(ap netip.AddrPort, key FrontendKey, v FrontendValue, ln syscall.Conn) error {
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uerr = s.objs.LmwListeners.Update(v.Slot, uint64(fd), ebpf.UpdateAny)
	}); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("frontend %s: listener into sockmap: %w", ap, uerr)
	}
	return s.objs.LmwFrontends.Update(&key, &v, ebpf.UpdateAny)
}

func (s *State) freeSlot() (uint32, error) {
	used := map[uint32]bool{}
	var k FrontendKey
	var v FrontendValue
	it := s.objs.LmwFrontends.Iterate()
	for it.Next(&k, &v) {
		used[v.Slot] = true
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	for i := uint32(0); i < s.objs.LmwListeners.MaxEntries(); i++ {
		if !used[i] {
			return i, nil
		}
	}
	return 0, errors.New("maps: no free frontend slot")
}

// RemoveFrontend stops dispatching ap (new connections fall through to
// whatever else listens there) and removes the address if we added it.
func (s *State) RemoveFrontend(ap netip.AddrPort) error {
	key := frontendKey(ap)
	var v FrontendValue
	if err := s.objs.LmwFrontends.Lookup(&key, &v); err != nil {
		return nil
	}
	s.objs.LmwListeners.Delete(v.Slot)
	if err := s.objs.LmwFrontends.Delete(&key); err != nil {
		return err
	}
	if v.Flags&FrontendOwnAddr != 0 {
		return removeLoopbackAddr(ap.Addr())
	}
	return nil
}

// Frontends lists the dispatched frontends.
func (s *State) Frontends() (map[netip.AddrPort]FrontendValue, error) {
	out := map[netip.AddrPort]FrontendValue{}
	var k FrontendKey
	var v FrontendValue
	it := s.objs.LmwFrontends.Iterate()
	for it.Next(&k, &v) {
		out[keyAddrPort(k)] = v
	}
	return out, it.Err()
}

func hostPrefix(a netip.Addr) *net.IPNet {
	a = a.Unmap()
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// addLoopbackAddr puts a on lo unless it is already local (loopback
// range or present on some interface); it reports whether it added it.
func addLoopbackAddr(a netip.Addr) (bool, error) {
	a = a.Unmap()
	if a.IsLoopback() && a.Is4() {
		return false, nil // 127/8 is local already
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return false, err
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a {
			return false, nil
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return false, err
	}
	if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: hostPrefix(a)}); err != nil {
		return false, fmt.Errorf("add %s to lo: %w", a, err)
	}
	return true, nil
}

func removeLoopbackAddr(a netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	err = netlink.AddrDel(lo, &netlink.Addr{IPNet: hostPrefix(a)})
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s from lo: %w", a, err)
	}
	return nil
}
