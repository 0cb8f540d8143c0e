package maps

import (
	"errors"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/bpf"
)

// Cookie returns the kernel's socket cookie of c, the key of the socket
// maps.
func Cookie(c syscall.Conn) (uint64, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cookie uint64
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cookie, gerr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); err != nil {
		return 0, err
	}
	return cookie, gerr
}

// Arm sets how the verdict treats the next bytes of socket cookie. Only
// the shim writes sock_ctls; it bumps ctl.Gen at every arm.
func (s *State) Arm(cookie uint64, ctl SockCtl) error {
	return s.objs.LmwSockCtls.Update(cookie, &ctl, ebpf.UpdateAny)
}

// AddSocket starts the verdict's bookkeeping for c at stream offset seen
// (the bytes the shim already read itself) and puts c into the SOCKHASH.
// Arm it first: from this call on, the verdict sees every byte c receives.
func (s *State) AddSocket(c syscall.Conn, cookie uint64, seen uint64) error {
	st := SockState{Seen: seen}
	if err := s.objs.LmwSockStates.Update(cookie, &st, ebpf.UpdateAny); err != nil {
		return err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uerr = s.objs.LmwSocks.Update(cookie, uint64(fd), ebpf.UpdateNoExist)
	}); err != nil {
		return err
	}
	return uerr
}

// SocketState reads the verdict's bookkeeping for cookie.
func (s *State) SocketState(cookie uint64) (SockState, error) {
	var st SockState
	err := s.objs.LmwSockStates.Lookup(cookie, &st)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return st, ErrNoSocket
	}
	return st, err
}

// ForgetSocket removes cookie from every socket map. Closing a socket
// removes it from the SOCKHASH by itself; the control and state entries
// are ours to delete.
func (s *State) ForgetSocket(cookie uint64) {
	s.objs.LmwSocks.Delete(cookie)
	s.objs.LmwSockCtls.Delete(cookie)
	s.objs.LmwSockStates.Delete(cookie)
}

// Detach takes a socket out of the SOCKHASH while it stays open: from
// then on its bytes stay in its own receive queue, as before it joined.
// Bytes the verdict passed to it and nobody read yet would be lost (they
// sit in the psock's queue, freed with it), so call Detach only when
// seen, the verdict's offset after the last byte the caller has, is
// current; lost reports whether the verdict saw more bytes before the
// socket left (the caller must then fail the connection). Its control
// and state entries are deleted.
func (s *State) Detach(cookie uint64, seen uint64) (lost bool, err error) {
	if err := s.objs.LmwSocks.Delete(cookie); err != nil {
		return false, err
	}
	st, err := s.SocketState(cookie)
	s.objs.LmwSockCtls.Delete(cookie)
	s.objs.LmwSockStates.Delete(cookie)
	if err != nil {
		return false, err
	}
	return st.Seen != seen, nil
}

// SocketCookies lists the sockets currently in lmw_socks (sk_skb datapath).
func (s *State) SocketCookies() ([]uint64, error) {
	var out []uint64
	var k, v uint64
	it := s.objs.LmwSocks.Iterate()
	for it.Next(&k, &v) {
		out = append(out, k)
	}
	return out, it.Err()
}

// ResponseEnds opens a reader of the ring buffer the programs write one
// ResponseEnd to for every response whose end they find (and every
// request body the sk_skb verdict carried to its end when asked to).
func (s *State) ResponseEnds() (*ringbuf.Reader, error) {
	return ringbuf.NewReader(s.objs.LmwResponseEnds)
}

// DecodeResponseEnd decodes one ring-buffer record.
func DecodeResponseEnd(rec ringbuf.Record) (ResponseEnd, bool) {
	var ev ResponseEnd
	if len(rec.RawSample) < 32 {
		return ev, false
	}
	b := rec.RawSample
	ne := nativeEndian
	ev.Cookie = ne.Uint64(b[0:])
	ev.Bytes = ne.Uint64(b[8:])
	ev.Gen = ne.Uint32(b[16:])
	ev.Replica = ne.Uint32(b[20:])
	ev.Status = ne.Uint32(b[24:])
	ev.How = ne.Uint32(b[28:])
	return ev, true
}

// AddClient puts a client socket into lmw_client_socks (sk_msg datapath),
// where lmw_reply can redirect to it. It stays there until it closes.
func (s *State) AddClient(c syscall.Conn, cookie uint64) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uerr = s.objs.LmwClientSocks.Update(cookie, uint64(fd), ebpf.UpdateNoExist)
	}); err != nil {
		return err
	}
	if errors.Is(uerr, ebpf.ErrKeyExist) {
		return nil
	}
	return uerr
}

// ClientInMap reports whether client cookie is in lmw_client_socks.
func (s *State) ClientInMap(cookie uint64) bool {
	var v uint64
	return s.objs.LmwClientSocks.Lookup(cookie, &v) == nil
}

// Paired reports whether the replica's end of the warden's upstream socket
// upstream (its cookie) joined lmw_replica_socks (sk_msg datapath).
func (s *State) Paired(upstream uint64) bool {
	var v uint64
	return s.objs.LmwReplicaSocks.Lookup(upstream, &v) == nil
}

// ReplicaSockets counts the replica sockets in lmw_replica_socks, and
// ClientSockets the client sockets in lmw_client_socks (for leak checks).
func (s *State) ReplicaSockets() (int, error) { return countKeys(s.objs.LmwReplicaSocks) }

// ClientSockets: see ReplicaSockets.
func (s *State) ClientSockets() (int, error) { return countKeys(s.objs.LmwClientSocks) }

func countKeys(m *ebpf.Map) (int, error) {
	n := 0
	var k, v uint64
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// NewSocketState starts the kernel's bookkeeping for cookie at stream
// offset seen, replacing any.
func (s *State) NewSocketState(cookie, seen uint64) error {
	st := SockState{Seen: seen}
	return s.objs.LmwSockStates.Update(cookie, &st, ebpf.UpdateAny)
}

// PairStats are lmw_pair's counters, summed over CPUs.
type PairStats struct {
	Paired       uint64 // a replica's socket joined lmw_replica_socks
	Failed       uint64 // it could not (no sk storage, SOCKHASH full)
	Client       uint64 // a client socket of a frontend joined lmw_client_socks
	ClientFailed uint64 // it could not (SOCKHASH full)
}

// PairStats reads lmw_pair_stats.
func (s *State) PairStats() (PairStats, error) {
	var c [bpf.LmwardenPairOutcomePAIR_OUTCOMES]uint64
	if err := sumCounters(s.objs.LmwPairStats, c[:]); err != nil {
		return PairStats{}, err
	}
	return PairStats{Paired: c[0], Failed: c[1], Client: c[2], ClientFailed: c[3]}, nil
}

// SocketInMap reports whether cookie is in the SOCKHASH.
func (s *State) SocketInMap(cookie uint64) bool {
	var v uint64
	return s.objs.LmwSocks.Lookup(cookie, &v) == nil
}

// Ctl reads the control entry of cookie (zero if none).
func (s *State) Ctl(cookie uint64) SockCtl {
	var c SockCtl
	s.objs.LmwSockCtls.Lookup(cookie, &c)
	return c
}
