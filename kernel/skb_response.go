package kernel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// RelayResponseBody implements datapath.Datapath. The upstream connection
// may be pooled afterwards (x.Response.Reusable stays as the head said)
// only when the exchange ended exactly at the response's end: every byte
// the verdict saw is accounted for, nothing stray arrived, and the request
// body the kernel carried has landed (skb_pool.go).
//
// It reads in three steps: the bytes the shim already holds of the body
// go to the client first (forwardHeld); the upstream is armed to carry the
// rest from the offset after them (arm); then the shim waits for the
// kernel's end of the response, forwarding whatever the verdict passes to
// it instead (wait).
func (k *SkbPath) RelayResponseBody(x *datapath.Exchange) error {
	slot, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	reusable := x.Response.Reusable
	x.Response.Reusable = false
	fr := frameOf(x.Response)
	user := k.takeUserExchange(x)
	if x.Response.Framing == http1.FramingNone {
		if u := k.upstream(x.Upstream); u != nil {
			x.Response.Reusable = reusable && k.landed(x, u)
		} else {
			x.Response.Reusable = reusable
		}
		return nil
	}
	if user {
		return k.relayResponseUser(x, fr, reusable, uc)
	}
	cc, err := k.join(x.Client, slot)
	var u *upstreamState
	if err == nil {
		u, err = k.joinUpstream(x.Upstream, slot)
	}
	if errors.Is(err, errNotJoinable) {
		// A side closed its sending half before its socket could join
		// (only established sockets may): most often a replica that
		// answered and closed, whose socket left the SOCKHASH at its
		// FIN and was forgotten by the sweep meanwhile. Its bytes are
		// still in its socket: relay them here, and pool nothing.
		return k.relayResponseUser(x, fr, false, uc)
	}
	if err != nil {
		return err
	}
	r := &responseRelay{k: k, x: x, u: u, uc: uc, fr: fr, cc: cc, reusable: reusable}
	seen, done, err := r.forwardHeld()
	if done || err != nil {
		return err
	}
	return r.carry(slot, seen)
}

// takeUserExchange reports whether x's request went through userspace
// (its upstream or client could not join the SOCKHASH), and forgets it.
func (k *SkbPath) takeUserExchange(x *datapath.Exchange) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	user := k.userX[x]
	delete(k.userX, x)
	return user
}

// relayResponseUser relays the response of an exchange whose request the
// kernel did not carry.
func (k *SkbPath) relayResponseUser(x *datapath.Exchange, fr bodyFrame, reusable bool, uc *byteCounters) error {
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

// responseRelay is one response body the kernel carries from an upstream
// in the SOCKHASH to its client, and what the shim knows of it meanwhile.
type responseRelay struct {
	k  *SkbPath
	x  *datapath.Exchange
	u  *upstreamState
	uc *byteCounters
	fr bodyFrame // where the body stands in the bytes the shim forwarded
	cc uint64    // the client's cookie
	// reusable is what the head said of the upstream connection, until
	// the relay finds a reason to close it.
	reusable bool

	ctl      maps.SockCtl // the upstream's arm; ctl.Gen is this response's
	tailMode bool         // the verdict passes the segment with the last byte
	tail     []byte       // what the shim has of that segment
	w0       uint64       // client bytes written before the kernel's next ones
	haveAt   uint64       // the stream offset after the bytes the shim got
	rearms   int
	ends     chan maps.ResponseEnd
	w        *upWatch
	stopped  bool // w is stopped (pool ran)

	lastProgress time.Time
	lastCarried  uint64
}

// forwardHeld sends the client what the shim holds of the body: what came
// with the head and what the verdict passed before the arm. It returns
// the stream offset after those bytes; done when the response ended
// within them (or the upstream failed: the relay is over either way).
func (r *responseRelay) forwardHeld() (seen uint64, done bool, err error) {
	x, fr := r.x, &r.fr
	// drainErr: the read failed, most often as the replica reset the
	// connection (one that closes with the request body unread does),
	// which the kernel reports once nothing the verdict passed is left to
	// read. What the shim holds is then the last of the response: it
	// still goes to the client, and nothing is armed.
	q, seen, drainErr := r.k.drainSynced(x.Upstream, r.u.cookie)
	have := append(append([]byte(nil), x.Upstream.Pending...), q...)
	x.Upstream.Pending = nil
	var forwarded uint64
	if len(have) > 0 {
		n, err := fr.Feed(have)
		if err != nil {
			return 0, true, err
		}
		if fr.Done() {
			// The whole response is here: the client leaves the
			// SOCKHASH before it can have it (see finishTail).
			if err := r.k.detachClient(x, r.cc); err != nil {
				return 0, true, err
			}
		}
		if _, err := x.Client.WriteAll(x.Idle, have[:n]); err != nil {
			return 0, true, err
		}
		forwarded += uint64(n)
		r.uc.down.Add(uint64(n))
		r.reusable = r.reusable && n == len(have)
	}
	x.BodyBytesDown += int64(forwarded)
	if fr.Done() {
		x.Response.Reusable = r.reusable && drainErr == nil && r.k.landed(x, r.u)
		return 0, true, nil
	}
	if drainErr != nil {
		// The cut that follows ends the client's stream where these
		// bytes left it.
		if fr.kind == http1.FramingChunked {
			x.NoteResponseFrame(fr.chunks)
		}
		return 0, true, drainErr
	}
	return seen, false, nil
}

// carry arms the upstream at stream offset seen and waits for the end of
// the response the kernel carries.
func (r *responseRelay) carry(slot uint32, seen uint64) error {
	k, x := r.k, r.x
	w0, err := written(x.Client.TCPConn)
	if err != nil {
		return err
	}
	r.w0, r.haveAt = w0, seen
	r.ends = make(chan maps.ResponseEnd, 4)
	if err := k.ends.watch(r.u.cookie, r.ends); err != nil {
		return err
	}
	defer k.ends.unwatch(r.u.cookie)
	if err := r.arm(slot, seen); err != nil {
		return err
	}
	// The upstream's FIN or RST is not carried across the redirect: one
	// read on it notices them (and gets bytes only if the arm failed).
	r.w = watchUpstream(x.Upstream.TCPConn)
	defer func() {
		if !r.stopped {
			r.w.stop()
		}
	}()
	return r.wait()
}

// arm hands the upstream's stream from offset seen on to the verdict,
// which carries it to the client under a new gen.
func (r *responseRelay) arm(slot uint32, seen uint64) error {
	u := r.u
	r.ctl = maps.SockCtl{Peer: r.cc, ArmAt: seen, Gen: u.nextGen(r.x), Mode: maps.ModeResponse, Replica: slot, Start: r.fr.kernel()}
	// The segment with the response's last byte comes to the shim, which
	// takes the client out of the SOCKHASH before writing it: the client's
	// next head then waits in a plain socket, to be peeked and handed over
	// like a first one (see finishTail). A close-delimited response has no
	// last byte the verdict could find (and no next request).
	r.tailMode = !r.fr.untilClose()
	if r.tailMode {
		r.ctl.Flags |= maps.CtlTailPass
	}
	return r.k.st.Arm(u.cookie, r.ctl)
}

// wait waits for the end of the armed response: a ring-buffer record for
// its gen, the tail the verdict passed, the upstream's end, or a stall.
func (r *responseRelay) wait() error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	r.lastProgress, r.lastCarried = time.Now(), 0
	for {
		select {
		case ev := <-r.ends:
			if ev.Gen == r.ctl.Gen {
				return r.finish(ev.Bytes)
			}
			// With CTL_TAIL_PASS there is no record: done when the
			// passed tail has been read (onRead).
		case rd := <-r.w.out:
			if done, err := r.onRead(rd); done || err != nil {
				return err
			}
		case <-tick.C:
			st, _ := r.k.st.SocketState(r.u.cookie)
			if st.Gen == r.ctl.Gen && st.Redirected != r.lastCarried {
				r.lastProgress, r.lastCarried = time.Now(), st.Redirected
			} else if time.Since(r.lastProgress) > r.x.Idle {
				return fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
			}
		}
	}
}

// onRead takes what the upstream watch read: bytes the verdict passed
// (the tail, or bytes it did not carry) or the upstream's end. done is
// true when the relay is over.
func (r *responseRelay) onRead(rd upRead) (done bool, err error) {
	gen := r.ctl.Gen
	if st, _ := r.k.st.SocketState(r.u.cookie); len(rd.data) > 0 && r.tailMode && st.Gen == gen && st.DoneGen == gen {
		// The verdict found the end and passed its segment: the only
		// bytes it passes from an armed socket.
		return r.onTail(rd, st)
	}
	if len(rd.data) > 0 {
		if done, err := r.onPassed(rd); done || err != nil {
			return true, err
		}
	}
	if rd.err == nil {
		return false, nil
	}
	return true, r.onEnd(rd.err)
}

// onEnd ends the relay at the upstream's FIN, RST or read error: a
// response the kernel carried to its end, or one that ends with the
// close, is whole; any other was cut short.
func (r *responseRelay) onEnd(rerr error) error {
	gen := r.ctl.Gen
	st, _ := r.k.st.SocketState(r.u.cookie)
	carried := uint64(0)
	if st.Gen == gen {
		carried = st.Redirected
	}
	switch {
	case st.Gen == gen && st.DoneGen == gen && !r.tailMode:
		return r.finish(carried)
	case r.fr.untilClose() && errors.Is(rerr, io.EOF):
		return r.finish(carried)
	case errors.Is(rerr, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return rerr
}

// onTail gathers the segment with the response's last byte, and ends the
// response once it is whole.
func (r *responseRelay) onTail(rd upRead, st maps.SockState) (done bool, err error) {
	r.tail = append(r.tail, rd.data...)
	need := st.Seen - r.ctl.ArmAt - st.Redirected
	if uint64(len(r.tail)) < need {
		if rd.err == nil {
			return false, nil
		}
		return true, io.ErrUnexpectedEOF
	}
	// Done with the upstream (its watch stopped, the pool decided) before
	// the client has the tail: its next request cannot come sooner, so it
	// never waits for the shim to stop the watch, a goroutine hand-off of
	// 0.1 to several ms under load. (A failed tail write closes the
	// upstream whatever pool decided.)
	r.pool(uint64(len(r.tail)) == need && rd.err == nil)
	if err := r.k.finishTail(r.x, r.cc, r.w0, st.Redirected, r.tail, r.uc); err != nil {
		return true, err
	}
	return true, nil
}

// onPassed forwards bytes the verdict passed instead of carrying them.
// Either the arm found bytes the shim had not read (the upstream streamed
// on between the shim's last read and the arm): nothing of this gen was
// carried; the shim forwards them, then arms again from the offset after
// them. Or the verdict stopped at malformed framing after it carried some:
// the shim's parser goes on from where the kernel's stopped, after the
// carried bytes landed.
func (r *responseRelay) onPassed(rd upRead) (done bool, err error) {
	x, gen := r.x, r.ctl.Gen
	if st, _ := r.k.st.SocketState(r.u.cookie); st.Gen == gen && st.HaltGen == gen {
		r.fr = frameFromKernel(st.Fr)
		if err := waitWritten(x.Client.TCPConn, r.w0+st.Redirected, x.Idle); err != nil {
			return true, err
		}
		x.BodyBytesDown += int64(st.Redirected)
		r.w0 += st.Redirected
		r.rearms = maxRearms // the kernel gave this response up
	}
	n, err := r.fr.Feed(rd.data)
	if err != nil {
		return true, err
	}
	if r.fr.Done() {
		if err := r.k.detachClient(x, r.cc); err != nil {
			return true, err
		}
	}
	if _, err := x.Client.WriteAll(x.Idle, rd.data[:n]); err != nil {
		return true, err
	}
	x.BodyBytesDown += int64(n)
	r.uc.down.Add(uint64(n))
	if r.fr.Done() {
		r.pool(n == len(rd.data) && rd.err == nil)
		return true, nil
	}
	r.haveAt += uint64(len(rd.data))
	r.w0 += uint64(n) // the kernel's bytes, if any, come after these
	r.lastProgress = time.Now()
	if rd.err == nil && r.rearms < maxRearms {
		return false, r.rearm()
	}
	return false, nil
}

// rearm arms the upstream again, under a new gen, from the offset after
// the bytes the shim forwarded.
func (r *responseRelay) rearm() error {
	r.rearms++
	r.k.rearms.Add(1)
	r.ctl.Gen, r.ctl.ArmAt, r.ctl.Start = r.u.nextGen(r.x), r.haveAt, r.fr.kernel()
	r.ctl.Flags |= maps.CtlRearm
	return r.k.st.Arm(r.u.cookie, r.ctl)
}

// finish ends a response the kernel carried to its end (carried bytes of
// the current gen). It returns once those bytes have landed: what the
// shim writes to this client next must not overtake them.
func (r *responseRelay) finish(carried uint64) error {
	r.x.BodyBytesDown += int64(carried)
	return waitWritten(r.x.Client.TCPConn, r.w0+carried, r.x.Idle)
}

// pool decides, once the response has ended, whether the connection may
// serve another exchange: exact when the response ended exactly at the
// end of what the shim read.
func (r *responseRelay) pool(exact bool) {
	r.stopped = true
	clean := r.w.stop()
	r.x.Response.Reusable = r.reusable && exact && clean && r.k.landed(r.x, r.u)
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
// seen nothing from it since it joined, after its request (so nothing
// passed sits unread in the psock, which leaving would free). Otherwise
// (pipelined bytes) it stays in, in pass mode, and its next head is read
// through the verdict.
func (k *SkbPath) detachClient(x *datapath.Exchange, cc uint64) error {
	if len(x.Client.Pending) > 0 {
		return nil
	}
	ctl := k.st.Ctl(cc)
	st, err := k.st.SocketState(cc)
	if err != nil || ctl.Mode != maps.ModePass || st.Seen != 0 {
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
