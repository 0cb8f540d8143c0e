package kernel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// SkbPath is the sk_skb Datapath (docs/kernel.md), the fallback where the
// sk_msg one cannot run. The shim still reads every request head and
// response head; from RelayRequestBody on, both sockets of the exchange
// sit in lmw_socks and the sk_skb verdict program carries the request body
// and the response body socket to socket. The shim learns where each ends
// from the verdict itself (a ring-buffer record when the last body byte
// was carried, or the passed segment holding a response's last byte), so
// RelayResponseBody returns exactly at the end and the in-flight count
// stays exact.
//
// Bytes the shim already holds (read with a head, or queued in the socket
// when it joins the map) it forwards itself, first; the kernel then carries
// only what follows. When the kernel cannot take over safely (the socket
// received bytes between the shim's last read and the arm) the verdict
// passes the rest to the shim, which forwards it here: slower, never
// reordered.
type SkbPath struct {
	st *maps.State
	counters
	ends endWaiters

	mu     sync.Mutex
	peeked map[uint64]peekedHead // by client cookie
	user1  *datapath.UserPath    // exchanges whose upstream cannot join (closed early)
	userX  map[*datapath.Exchange]bool
	ups    map[*net.TCPConn]*upstreamState // upstream sockets that joined the SOCKHASH
	rearms atomic.Uint64                   // responses armed again after an arm lost the race

	stop chan struct{}
	done chan struct{}
}

// NewSkbPath returns the sk_skb datapath over state loaded in maps.ModeSkb;
// Close stops its background work (the state stays the caller's).
func NewSkbPath(st *maps.State) *SkbPath {
	k := &SkbPath{st: st, counters: newCounters(st), ends: endWaiters{st: st},
		peeked: map[uint64]peekedHead{}, user1: datapath.NewUserPath(), userX: map[*datapath.Exchange]bool{},
		ups: map[*net.TCPConn]*upstreamState{}, stop: make(chan struct{}), done: make(chan struct{})}
	go k.sweep()
	return k
}

// Name implements datapath.Datapath.
func (k *SkbPath) Name() string { return "skb" }

// State is the pinned kernel state the path uses.
func (k *SkbPath) State() *maps.State { return k.st }

// Collector is the path's Prometheus collector.
func (k *SkbPath) Collector() prometheus.Collector { return collector{&k.counters} }

// Close stops the sweeper and the ring buffer's reader.
func (k *SkbPath) Close() error {
	select {
	case <-k.stop:
	default:
		close(k.stop)
		<-k.done
		k.ends.close()
	}
	return nil
}

// sweep drops the map entries of sockets that closed.
func (k *SkbPath) sweep() {
	defer close(k.done)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	var prev map[uint64]bool
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			prev = k.st.SweepClosed(prev)
			k.forgetStalePeeks()
			k.forgetClosedUpstreams()
		}
	}
}

// Rearms counts the responses armed again because the upstream streamed
// on between the shim's last read and its arm (the shim forwarded those
// bytes itself first).
func (k *SkbPath) Rearms() uint64 { return k.rearms.Load() }

// join puts c into the SOCKHASH (if it is not there yet) in pass mode.
// Whatever c has queued is read first into Pending: a segment left half
// read when a socket joins is verdicted again from its start (measured on
// 6.18), which would send the read part twice.
func (k *SkbPath) join(c *datapath.Conn, slot uint32) (uint64, error) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil {
		return 0, err
	}
	if k.st.SocketInMap(cookie) {
		return cookie, nil
	}
	q, err := drainQueued(c.TCPConn)
	if err != nil {
		return 0, err
	}
	c.Pending = append(c.Pending, q...)
	if err := k.st.Arm(cookie, maps.SockCtl{Mode: maps.ModePass, Replica: slot}); err != nil {
		return 0, err
	}
	if err := k.st.AddSocket(c.TCPConn, cookie, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			// Only established sockets may join: this peer already
			// sent its FIN (a replica that answered and closed).
			return 0, errNotJoinable
		}
		return 0, fmt.Errorf("kernel datapath: socket into SOCKHASH: %w", err)
	}
	// Bytes that arrived since the drain: verdicted now, not inside a
	// later read (see maps.VerdictQueued).
	if err := verdictQueued(c.TCPConn); err != nil {
		return 0, err
	}
	return cookie, nil
}

var errNotJoinable = errors.New("kernel datapath: socket no longer established")

// established reports whether c is in TCP_ESTABLISHED (a client in the
// SOCKHASH already is, or was when it joined).
func established(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		ok = err == nil && info.State == unix.BPF_TCP_ESTABLISHED
	})
	return ok
}

// relayRequestUser moves a request body in userspace for an exchange the
// kernel cannot carry; a client in the SOCKHASH is read without splice.
func (k *SkbPath) relayRequestUser(x *datapath.Exchange, uc *byteCounters) error {
	cc, err := maps.Cookie(x.Client.TCPConn)
	if err != nil {
		return err
	}
	if !k.st.SocketInMap(cc) {
		return k.user1.RelayRequestBody(x)
	}
	var n int64
	switch x.Request.Framing {
	case http1.FramingLength:
		fr := bodyFrame{kind: http1.FramingLength, remaining: uint64(x.Request.ContentLength)}
		n, err = relayPlain(x.Upstream, x.Client, &fr, x.Idle)
	case http1.FramingChunked:
		n, err = relayChunked(x.Upstream, x.Client, x.Idle)
	}
	x.BodyBytesUp += n
	uc.up.Add(uint64(n))
	return err
}

// relayPlain forwards a body by framing fr with plain reads and writes.
func relayPlain(dst, src *datapath.Conn, fr *bodyFrame, idle time.Duration) (int64, error) {
	var total int64
	for {
		if len(src.Pending) > 0 {
			n, err := fr.Feed(src.Pending)
			if err != nil {
				return total, err
			}
			if n > 0 {
				if _, err := dst.WriteAll(idle, src.Pending[:n]); err != nil {
					return total, err
				}
				total += int64(n)
			}
			src.Pending = src.Pending[n:]
		}
		if fr.Done() {
			return total, nil
		}
		_ = src.SetReadDeadline(time.Now().Add(idle))
		if err := src.Fill(); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return total, err
		}
	}
}

// drainSynced reads what the verdict passed to the shim and is still
// queued, and returns it with the stream offset after it: the verdict
// runs under the socket lock, as does a read, so reading the offset before
// a read that finds the queue empty gives exactly the bytes the shim has.
func (k *SkbPath) drainSynced(c *datapath.Conn, cookie uint64) ([]byte, uint64, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		st, err := k.st.SocketState(cookie)
		if err != nil {
			return nil, 0, err
		}
		n, err := readNow(c.TCPConn, buf)
		if n > 0 {
			out = append(out, buf[:n]...)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return out, 0, err
		}
		// Empty, or the peer's FIN: whoever waits next sees the EOF.
		return out, st.Seen, nil
	}
}

// readNow reads what is queued without waiting: (0, nil) if nothing is.
func readNow(c *net.TCPConn, buf []byte) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return 0, err
	}
	if errors.Is(rerr, unix.EAGAIN) {
		return 0, nil
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// RelayRequestBody implements datapath.Datapath.
func (k *SkbPath) RelayRequestBody(x *datapath.Exchange) error {
	slot, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	// Both sockets join now: the upstream before its response head
	// arrives, the client before the shim's client watch starts reading it.
	// Only established sockets may join a sockmap: a client that already
	// half-closed (sent its FIN with the request) is served in userspace.
	var u *upstreamState
	cc, err := maps.Cookie(x.Client.TCPConn)
	if err != nil {
		return err
	}
	err = errNotJoinable
	if k.st.SocketInMap(cc) || established(x.Client.TCPConn) {
		u, err = k.joinUpstream(x.Upstream, slot)
	}
	if errors.Is(err, errNotJoinable) {
		k.mu.Lock()
		k.userX[x] = true
		k.mu.Unlock()
		// A head the shim only peeked is still in the socket: read it
		// first, or the userspace copy would send it as the body, and
		// the connection's next head would be this one again.
		if size, ok := k.takePeeked(cc); ok {
			if err := readExactly(x.Client.TCPConn, size, x.Idle); err != nil {
				return err
			}
		}
		return k.relayRequestUser(x, uc)
	}
	if err != nil {
		return err
	}
	if size, ok := k.takePeeked(cc); ok {
		return k.carryPeeked(x, cc, u, slot, uint64(size), uc)
	}
	ccookie, err := k.join(x.Client, slot)
	if err != nil {
		return err
	}
	switch x.Request.Framing {
	case http1.FramingLength:
		if x.Request.ContentLength > 0 {
			return k.carryRequestBody(x, ccookie, u, slot, uc)
		}
	case http1.FramingChunked:
		n, err := relayChunked(x.Upstream, x.Client, x.Idle)
		x.BodyBytesUp += n
		uc.up.Add(uint64(n))
		return err
	}
	return nil
}

// carryPeeked hands over a client whose first head the shim only peeked:
// the whole stream is still in the socket, so the verdict drops the head
// bytes and carries the body after them, from the first byte on.
func (k *SkbPath) carryPeeked(x *datapath.Exchange, cc uint64, u *upstreamState, slot uint32, size uint64, uc *byteCounters) error {
	// The head is read now (it was only peeked): the verdict then sees the
	// segment that holds its end again from its start and trims the part
	// read (by the socket's read position), which keeps that position
	// right, so the client can leave the SOCKHASH after its response and
	// be read normally again (finishTail). A head longer than one trim
	// (bpf_skb_adjust_room moves at most 4095 bytes) takes the drained path.
	if err := readExactly(x.Client.TCPConn, int(size), x.Idle); err != nil {
		return err
	}
	if size > maxTrim {
		ccookie, err := k.join(x.Client, slot)
		if err != nil {
			return err
		}
		if x.Request.Framing == http1.FramingLength && x.Request.ContentLength > 0 {
			return k.carryRequestBody(x, ccookie, u, slot, uc)
		}
		if x.Request.Framing == http1.FramingChunked {
			n, err := relayChunked(x.Upstream, x.Client, x.Idle)
			x.BodyBytesUp += n
			uc.up.Add(uint64(n))
			return err
		}
		return nil
	}
	var length uint64
	if x.Request.Framing == http1.FramingLength {
		length = uint64(x.Request.ContentLength)
	}
	w0, err := written(x.Upstream.TCPConn)
	if err != nil {
		return err
	}
	ends := make(chan maps.ResponseEnd, 4)
	if length > 0 {
		if err := k.ends.watch(cc, ends); err != nil {
			return err
		}
		defer k.ends.unwatch(cc)
	}
	ctl := maps.SockCtl{Peer: u.cookie, ArmAt: size, BodyEnd: size + length, Gen: 1, Mode: maps.ModeRequest, Replica: slot}
	if err := k.st.Arm(cc, ctl); err != nil {
		return err
	}
	if err := k.st.AddSocket(x.Client.TCPConn, cc, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("kernel datapath: socket into SOCKHASH: %w", err)
		}
		// The client half-closed since it was checked: it cannot join
		// (only established sockets may), so its body, still all in its
		// socket (the head is read), is copied in userspace, and so is
		// the response (the upstream is in the SOCKHASH: plain reads).
		k.st.ForgetSocket(cc)
		k.mu.Lock()
		k.userX[x] = true
		k.mu.Unlock()
		return k.relayRequestUser(x, uc)
	}
	if err := verdictQueued(x.Client.TCPConn); err != nil {
		return err
	}
	switch {
	case length > 0:
		return k.waitBody(x, cc, u, ctl, length, w0, ends, uc)
	case x.Request.Framing == http1.FramingChunked:
		n, err := relayChunked(x.Upstream, x.Client, x.Idle)
		x.BodyBytesUp += n
		uc.up.Add(uint64(n))
		return err
	}
	return nil
}

// maxTrim is the most bytes bpf_skb_adjust_room takes off a segment.
const maxTrim = 4095

// readExactly consumes n bytes the shim already peeked.
func readExactly(c *net.TCPConn, n int, idle time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(idle))
	defer c.SetReadDeadline(time.Time{})
	_, err := io.ReadFull(c, make([]byte, n))
	return err
}

func (k *SkbPath) carryRequestBody(x *datapath.Exchange, cc uint64, u *upstreamState, slot uint32, uc *byteCounters) error {
	remaining := uint64(x.Request.ContentLength)
	q, seen, err := k.drainSynced(x.Client, cc)
	if err != nil {
		return err
	}
	have := append(append([]byte(nil), x.Client.Pending...), q...)
	n := min(uint64(len(have)), remaining)
	if n > 0 {
		if _, err := x.Upstream.WriteAll(x.Idle, have[:n]); err != nil {
			return err
		}
		remaining -= n
		x.BodyBytesUp += int64(n)
		uc.up.Add(n)
	}
	x.Client.Pending = have[n:]
	if remaining == 0 {
		return nil
	}
	w0, err := written(x.Upstream.TCPConn)
	if err != nil {
		return err
	}
	ends := make(chan maps.ResponseEnd, 4)
	if err := k.ends.watch(cc, ends); err != nil {
		return err
	}
	defer k.ends.unwatch(cc)
	gen := k.st.Ctl(cc).Gen + 1
	ctl := maps.SockCtl{Peer: u.cookie, ArmAt: seen, BodyEnd: seen + remaining, Gen: gen, Mode: maps.ModeRequest, Replica: slot}
	if err := k.st.Arm(cc, ctl); err != nil {
		return err
	}

	return k.waitBody(x, cc, u, ctl, remaining, w0, ends, uc)
}

// waitBody waits until the kernel carried the body armed by ctl, of
// remaining bytes, forwarding itself whatever the verdict passes instead.
func (k *SkbPath) waitBody(x *datapath.Exchange, cc uint64, u *upstreamState, ctl maps.SockCtl, remaining, w0 uint64, ends chan maps.ResponseEnd, uc *byteCounters) error {
	gen := ctl.Gen
	var carried, user uint64
	var buf []byte // only for bytes passed instead of carried
	pause := 20 * time.Microsecond
	lastProgress, lastTotal := time.Now(), uint64(0)
	look := true // look without waiting first
	for ; ; look = false {
		// The first look needs no wait: a body already queued when the
		// client was armed has been verdicted inside that call.
		if !look {
			select {
			case ev := <-ends:
				if ev.Gen == gen && ev.How == 2 {
					carried = ev.Bytes
				}
			case <-time.After(pause):
				pause = min(2*pause, 2*time.Millisecond)
			}
		}
		if st, err := k.st.SocketState(cc); err == nil && st.Gen == gen {
			carried = max(carried, st.Redirected)
		}
		if carried+user >= remaining {
			break
		}
		if ctl.Flags&maps.CtlNotify == 0 {
			// The body is still arriving: from now on the verdict
			// wakes the ring buffer's reader at its end (the arm left
			// it out, for the usual case of a body already queued).
			// The same gen: the verdict's count goes on.
			ctl.Flags |= maps.CtlNotify
			if err := k.st.Arm(cc, ctl); err != nil {
				return err
			}
			look = true
			continue
		}
		// Bytes passed to the shim mean the kernel stopped carrying this
		// body (its counter is final): forward the rest here, after the
		// carried bytes have landed.
		if buf == nil {
			buf = make([]byte, 64<<10)
		}
		n, rerr := readNow(x.Client.TCPConn, buf)
		if n > 0 {
			if st, err := k.st.SocketState(cc); err == nil && st.Gen == gen {
				carried = st.Redirected
			}
			m := min(uint64(n), remaining-carried-user)
			if err := waitWritten(x.Upstream.TCPConn, w0+carried+user, x.Idle); err != nil {
				return err
			}
			if _, err := x.Upstream.WriteAll(x.Idle, buf[:m]); err != nil {
				return err
			}
			user += m
			uc.up.Add(m)
			x.Client.Pending = append(x.Client.Pending, buf[m:n]...)
			pause = 20 * time.Microsecond
			continue
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			return rerr
		}
		if t := carried + user; t != lastTotal {
			lastProgress, lastTotal = time.Now(), t
		} else if time.Since(lastProgress) > x.Idle {
			return fmt.Errorf("kernel datapath: request body stalled: %w", errIdle)
		}
		if !x.BodyDeadline.IsZero() && time.Now().After(x.BodyDeadline) {
			return fmt.Errorf("kernel datapath: request body not received by its deadline: %w", errIdle)
		}
	}
	x.BodyBytesUp += int64(carried + user)
	// The carried bytes are on their way through the upstream's psock
	// worker: return once they have landed. An upstream that reads the
	// head, answers and closes would otherwise have body bytes arrive
	// after its close, which resets the connection, and the reset frees
	// the response bytes the verdict had passed to the shim.
	u.want = w0 + carried + user
	return waitWritten(x.Upstream.TCPConn, u.want, x.Idle)
}

var errIdle = errors.New("idle timeout")

// relayChunked forwards a chunked request body, which the kernel does not
// carry, with plain reads and writes: a socket in a sockmap must not be
// spliced (splice reads the TCP queue, which the verdict empties). Bytes
// past the body stay in src.Pending.
func relayChunked(dst, src *datapath.Conn, idle time.Duration) (int64, error) {
	return datapath.RelayChunked(dst, src, idle, false, false)
}

// Capabilities implements datapath.Datapath: the sk_skb datapath peeks a
// connection's first head and waits for the next without reading it, may
// leave a head in the socket ahead of the body, and says where a cut
// response stands.
func (k *SkbPath) Capabilities() datapath.Capabilities {
	return datapath.Capabilities{HeadReader: k, HeadWaiter: k, Queued: k, Cutter: k}
}

var (
	_ datapath.Datapath       = (*SkbPath)(nil)
	_ datapath.HeadReader     = (*SkbPath)(nil)
	_ datapath.HeadWaiter     = (*SkbPath)(nil)
	_ datapath.QueuedRequest  = (*SkbPath)(nil)
	_ datapath.ResponseCutter = (*SkbPath)(nil)
)
