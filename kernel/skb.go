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
	// worker: return once they have landed. Returning earlier was tried:
	// an upstream that reads the head, answers and closes then has body
	// bytes arrive after its close, which resets the connection, and the
	// reset frees the response bytes the verdict had passed to the shim
	// (TestReplicaDyingMidStreamEndsTheClientResponse failed 6 to 96 in
	// 100 with three runs side by side; none with the wait).
	u.want = w0 + carried + user
	return waitWritten(x.Upstream.TCPConn, u.want, x.Idle)
}

var errIdle = errors.New("idle timeout")

// RelayResponseBody implements datapath.Datapath. The upstream connection may be
// pooled afterwards (x.Response.Reusable stays as the head said) only when
// the exchange ended exactly at the response's end: every byte the
// verdict saw is accounted for, nothing stray arrived, and the request
// body the kernel carried has landed (kernel_pool.go).
func (k *SkbPath) RelayResponseBody(x *datapath.Exchange) error {
	slot, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	reusable := x.Response.Reusable
	x.Response.Reusable = false
	fr := frameOf(x.Response)
	switch x.Response.Framing {
	case http1.FramingNone:
		k.mu.Lock()
		delete(k.userX, x)
		k.mu.Unlock()
		if u := k.upstream(x.Upstream); u != nil {
			x.Response.Reusable = reusable && k.landed(x, u)
		} else {
			x.Response.Reusable = reusable
		}
		return nil
	}
	k.mu.Lock()
	user := k.userX[x]
	delete(k.userX, x)
	k.mu.Unlock()
	if user {
		if k.upstream(x.Upstream) != nil {
			// A pooled upstream still in the SOCKHASH: plain reads.
			n, err := relayResponsePlain(x, fr)
			x.BodyBytesDown += n
			uc.down.Add(uint64(n))
			return err
		}
		x.Response.Reusable = reusable
		return k.user1.RelayResponseBody(x)
	}
	ccookie, err := k.join(x.Client, slot)
	if err != nil {
		return err
	}
	u, err := k.joinUpstream(x.Upstream, slot)
	if err != nil {
		return err
	}
	ucookie := u.cookie
	// drainErr: the read failed, most often as the replica reset the
	// connection (one that closes with the request body unread does),
	// which the kernel reports once nothing the verdict passed is left to
	// read. What the shim holds is then the last of the response: it
	// still goes to the client, and nothing is armed.
	q, seen, drainErr := k.drainSynced(x.Upstream, ucookie)
	have := append(append([]byte(nil), x.Upstream.Pending...), q...)
	x.Upstream.Pending = nil
	var forwarded uint64
	if len(have) > 0 {
		n, err := fr.Feed(have)
		if err != nil {
			return err
		}
		if fr.Done() {
			// The whole response is here: the client leaves the
			// SOCKHASH before it can have it (see finishTail).
			if err := k.detachClient(x, ccookie); err != nil {
				return err
			}
		}
		if _, err := x.Client.WriteAll(x.Idle, have[:n]); err != nil {
			return err
		}
		forwarded += uint64(n)
		uc.down.Add(uint64(n))
		reusable = reusable && n == len(have)
	}
	x.BodyBytesDown += int64(forwarded)
	if fr.Done() {
		x.Response.Reusable = reusable && drainErr == nil && k.landed(x, u)
		return nil
	}
	if drainErr != nil {
		// The cut that follows ends the client's stream where these
		// bytes left it.
		if fr.kind == http1.FramingChunked {
			x.NoteResponseFrame(fr.chunks)
		}
		return drainErr
	}
	w0, err := written(x.Client.TCPConn)
	if err != nil {
		return err
	}
	ends := make(chan maps.ResponseEnd, 4)
	if err := k.ends.watch(ucookie, ends); err != nil {
		return err
	}
	defer k.ends.unwatch(ucookie)
	u.gen++
	gen := u.gen
	u.armedFor = x
	ctl := maps.SockCtl{Peer: ccookie, ArmAt: seen, Gen: gen, Mode: maps.ModeResponse, Replica: slot, Start: fr.kernel()}
	// The segment with the response's last byte comes to the shim, which
	// takes the client out of the SOCKHASH before writing it: the client's
	// next head then waits in a plain socket, to be peeked and handed over
	// like a first one (see finishTail). A close-delimited response has no
	// last byte the verdict could find (and no next request).
	tailMode := !fr.untilClose()
	if tailMode {
		ctl.Flags |= maps.CtlTailPass
	}
	var tail []byte
	if err := k.st.Arm(ucookie, ctl); err != nil {
		return err
	}

	// The upstream's FIN or RST is not carried across the redirect: one
	// read on it notices them (and gets bytes only if the arm failed).
	w := watchUpstream(x.Upstream.TCPConn)
	stopped := false
	defer func() {
		if !stopped {
			w.stop()
		}
	}()
	// pool decides, once the response has ended, whether the connection
	// may serve another exchange.
	pool := func(exact bool) {
		stopped = true
		clean := w.stop()
		x.Response.Reusable = reusable && exact && clean && k.landed(x, u)
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastProgress, lastCarried := time.Now(), uint64(0)
	haveAt, rearms := seen, 0 // the stream offset after the bytes the shim got
	finish := func(carried uint64) error {
		x.BodyBytesDown += int64(carried)
		// Return once the carried bytes have landed: what the shim writes
		// to this client next must not overtake them.
		return waitWritten(x.Client.TCPConn, w0+carried, x.Idle)
	}
	for {
		select {
		case ev := <-ends:
			if ev.Gen == gen {
				return finish(ev.Bytes)
			}
			// With CTL_TAIL_PASS there is no record: done when the
			// passed tail has been read (below).
		case r := <-w.out:
			if st, _ := k.st.SocketState(ucookie); len(r.data) > 0 && tailMode && st.Gen == gen && st.DoneGen == gen {
				// The verdict found the end and passed its segment: the
				// only bytes it passes from an armed socket.
				tail = append(tail, r.data...)
				if need := st.Seen - ctl.ArmAt - st.Redirected; uint64(len(tail)) >= need {
					if err := k.finishTail(x, ccookie, w0, st.Redirected, tail, uc); err != nil {
						return err
					}
					pool(uint64(len(tail)) == need && r.err == nil)
					return nil
				}
				if r.err == nil {
					continue
				}
				return io.ErrUnexpectedEOF
			}
			if len(r.data) > 0 {
				// The arm found bytes the shim had not read (the upstream
				// streamed on between the shim's last read and the arm):
				// nothing of this gen was carried; the shim forwards
				// them, then arms again from the offset after them. Or
				// the verdict stopped at malformed framing after it
				// carried some: the shim's parser goes on from where
				// the kernel's stopped, after the carried bytes landed.
				if st, _ := k.st.SocketState(ucookie); st.Gen == gen && st.HaltGen == gen {
					fr = frameFromKernel(st.Fr)
					if err := waitWritten(x.Client.TCPConn, w0+st.Redirected, x.Idle); err != nil {
						return err
					}
					x.BodyBytesDown += int64(st.Redirected)
					w0 += st.Redirected
					rearms = maxRearms // the kernel gave this response up
				}
				n, err := fr.Feed(r.data)
				if err != nil {
					return err
				}
				if fr.Done() {
					if err := k.detachClient(x, ccookie); err != nil {
						return err
					}
				}
				if _, err := x.Client.WriteAll(x.Idle, r.data[:n]); err != nil {
					return err
				}
				x.BodyBytesDown += int64(n)
				uc.down.Add(uint64(n))
				if fr.Done() {
					pool(n == len(r.data) && r.err == nil)
					return nil
				}
				haveAt += uint64(len(r.data))
				w0 += uint64(n) // the kernel's bytes, if any, come after these
				lastProgress = time.Now()
				if r.err == nil && rearms < maxRearms {
					rearms++
					k.rearms.Add(1)
					u.gen++
					gen = u.gen
					ctl.Gen, ctl.ArmAt, ctl.Start = gen, haveAt, fr.kernel()
					ctl.Flags |= maps.CtlRearm
					if err := k.st.Arm(ucookie, ctl); err != nil {
						return err
					}
				}
			}
			if r.err != nil {
				st, _ := k.st.SocketState(ucookie)
				carried := uint64(0)
				if st.Gen == gen {
					carried = st.Redirected
				}
				if st.Gen == gen && st.DoneGen == gen && !tailMode {
					return finish(carried)
				}
				if fr.untilClose() && errors.Is(r.err, io.EOF) {
					return finish(carried)
				}
				if errors.Is(r.err, io.EOF) {
					return io.ErrUnexpectedEOF
				}
				return r.err
			}
		case <-tick.C:
			st, _ := k.st.SocketState(ucookie)
			if st.Gen == gen && st.Redirected != lastCarried {
				lastProgress, lastCarried = time.Now(), st.Redirected
			} else if time.Since(lastProgress) > x.Idle {
				return fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
			}
		}
	}
}

// maxRearms bounds how often one response is armed again after an arm
// lost the race with a streaming upstream (each try costs a map update;
// the shim forwards what arrived meanwhile, so nothing is lost either way).
const maxRearms = 16

// finishTail ends a response whose last segment the verdict passed: once
// the carried bytes have landed, the client leaves the SOCKHASH (it cannot
// have sent anything yet: it is still waiting for this tail), then the
// shim writes the tail.
func (k *SkbPath) finishTail(x *datapath.Exchange, cc, w0, carried uint64, tail []byte, uc *byteCounters) error {
	x.BodyBytesDown += int64(carried)
	if err := waitWritten(x.Client.TCPConn, w0+carried, x.Idle); err != nil {
		return err
	}
	if err := k.detachClient(x, cc); err != nil {
		return err
	}
	if _, err := x.Client.WriteAll(x.Idle, tail); err != nil {
		return err
	}

	x.BodyBytesDown += int64(len(tail))
	uc.down.Add(uint64(len(tail)))
	return nil
}

// detachClient takes the client out of the SOCKHASH when the verdict has
// seen nothing from it past its request (so nothing passed sits unread in
// the psock, which leaving would free). Otherwise (pipelined bytes, a
// chunked request) it stays in, in pass mode, as before.
func (k *SkbPath) detachClient(x *datapath.Exchange, cc uint64) error {
	if len(x.Client.Pending) > 0 {
		return nil
	}
	ctl := k.st.Ctl(cc)
	st, err := k.st.SocketState(cc)
	if err != nil || ctl.Mode != maps.ModeRequest || st.Gen != ctl.Gen || st.Seen != ctl.BodyEnd {
		return nil
	}
	// The shim's client watch (forward.go) is reading this socket: a read
	// deadline in the past ends its read before the next head can arrive
	// (its stop clears the deadline), so the next head stays unread.
	_ = x.Client.SetReadDeadline(time.Unix(1, 0))
	waitReaders(x.Client.TCPConn)
	lost, err := k.st.Detach(cc, st.Seen)
	if err != nil {
		return fmt.Errorf("kernel datapath: client out of SOCKHASH: %w", err)
	}
	if lost {
		return errPipelinedLost
	}
	return nil
}

// waitReaders returns once no Read of c is under way: a raw read takes
// the same lock a Read holds until it returns. Woken by an expired
// deadline, the client watch's Read might otherwise run only after the
// next request arrived, and read it (a wake-up for new data does not
// check the deadline).
func waitReaders(c *net.TCPConn) {
	if raw, err := c.SyscallConn(); err == nil {
		_ = raw.Read(func(uintptr) bool { return true })
	}
}

var errPipelinedLost = errors.New("kernel datapath: client bytes arrived while leaving the SOCKHASH")

// relayChunked forwards a chunked request body, which the kernel does not
// carry, with plain reads and writes: a socket in a sockmap must not be
// spliced (splice reads the TCP queue, which the verdict empties). Bytes
// past the body stay in src.Pending.
func relayChunked(dst, src *datapath.Conn, idle time.Duration) (int64, error) {
	return datapath.RelayChunked(dst, src, idle, false, false)
}

var _ datapath.Datapath = (*SkbPath)(nil)
