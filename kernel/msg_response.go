package kernel

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// ArmResponse implements datapath.ResponseCarrier: before the request goes out,
// the replica's end of x.Upstream is armed to carry the response to the
// client socket, at most credit bytes of it.
func (k *MsgPath) ArmResponse(x *datapath.Exchange) (bool, error) {
	if k.armsStopped() {
		return false, nil // fell back: the shim relays (msg_fallback.go)
	}
	slot, _, err := k.slot(x)
	if err != nil {
		return false, err
	}
	u, err := k.upstream(x.Upstream, x.Upstream.RemoteAddr().String())
	if err != nil || !u.paired {
		return false, err
	}
	cc, err := k.client(x.Client)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// Only an established socket may join a sockmap: this client
		// already sent its FIN (it half-closed after its request). The
		// shim answers it, as in user mode.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cr := credit(x.Client)
	if cr < minCredit {
		return false, nil
	}
	at := u.next
	if !u.nextKnown {
		st, err := k.st.SocketState(u.cookie)
		if err != nil {
			return false, err
		}
		at = st.Seen
	}
	// lmw_reply passes the response's last byte to the shim: it has
	// counted the response done before the client can send its next
	// request (see AwaitResponse).
	ctl := maps.SockCtl{Peer: cc, ArmAt: at, Credit: cr, Gen: u.ctl.Gen + 1, Mode: maps.ModeReply, Replica: slot}
	if x.Request.Method == "HEAD" {
		ctl.Flags |= maps.CtlNoBody
	}
	ctl.Flags |= k.faultFlags()
	if err := k.st.Arm(u.cookie, ctl); err != nil {
		return false, err
	}
	u.nextKnown, u.ctl = false, ctl
	u.armed.Store(true)
	return true, nil
}

// disarmSettle is how long Disarm waits for a run of lmw_reply that read
// the old arm (it lasts microseconds) to have finished before it looks at
// what was carried: only the rare paths that write to the client
// themselves pay it.
const disarmSettle = time.Millisecond

// Disarm implements datapath.ResponseCarrier: the same arm with CTL_HANDOFF,
// which the kernel honours only before it carried a byte of the response.
func (k *MsgPath) Disarm(x *datapath.Exchange) bool {
	if x.Upstream == nil {
		return false
	}
	u, ok := x.Upstream.Datapath.(*msgUpstream)
	if !ok || !u.armed.Load() {
		return false
	}
	ctl := u.ctl
	ctl.Flags |= maps.CtlHandoff
	if err := k.st.Arm(u.cookie, ctl); err != nil {
		return true // cannot tell: keep off the client
	}
	time.Sleep(disarmSettle)
	st, err := k.st.SocketState(u.cookie)
	return err != nil || (st.Gen == ctl.Gen && st.Redirected > 0)
}

// AnsweredEarly implements datapath.ResponseCarrier: the replica has sent
// something of its response (the kernel saw it, or it waits upstream).
func (k *MsgPath) AnsweredEarly(x *datapath.Exchange) bool {
	u, ok := x.Upstream.Datapath.(*msgUpstream)
	if !ok {
		return false
	}
	st, err := k.st.SocketState(u.cookie)
	return err == nil && st.Gen == u.ctl.Gen
}

// stallCheck is how often a wait looks whether the kernel is still
// carrying the response (sock_state.seen moves): without progress for
// x.Idle the exchange is given up.
const stallCheck = time.Second

// readBufs holds the buffers of the waits' upstream reads, which bring the
// response's last byte, or the bytes the kernel did not carry.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// AwaitResponse implements datapath.ResponseCarrier. The exchange's goroutine
// waits in a read of the upstream socket: the kernel carries the response
// but for its last byte, which it passes there (CTL_TAIL_PASS), and the
// shim relays it, so it has counted the response done before the client
// has the whole of it (and can send its next request). The same read sees
// a FIN, a reset, and every byte the kernel did not carry.
func (k *MsgPath) AwaitResponse(x *datapath.Exchange) (*http1.ResponseHead, bool, error) {
	u := x.Upstream.Datapath.(*msgUpstream)
	_, uc, err := k.slot(x)
	if err != nil {
		return nil, false, err
	}
	gen := u.ctl.Gen
	up := x.Upstream.TCPConn
	defer up.SetReadDeadline(time.Time{})
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	lastProgress, lastSeen := time.Now(), uint64(0)
	var endSeen time.Time // when a wait first found the kernel past the end
	for {
		_ = up.SetReadDeadline(time.Now().Add(stallCheck))
		n, rerr := up.Read(buf)
		if n == 0 && rerr == nil {
			continue
		}
		if n == 0 && isTimeout(rerr) {
			st, _ := k.st.SocketState(u.cookie)
			if st.Gen == gen && st.DoneGen == gen && st.HaltGen != gen {
				// The kernel found the end, and its last byte has
				// not come: checked only on these wakes, which a
				// response longer than stallCheck has anyway.
				if endSeen.IsZero() {
					endSeen = time.Now()
				} else if time.Since(endSeen) >= tailBound {
					return k.tailLost(x, u, st)
				}
			}
			if st.Gen == gen && st.Seen != lastSeen {
				lastProgress, lastSeen = time.Now(), st.Seen
			} else if time.Since(lastProgress) > x.Idle {
				if st.Gen != gen {
					return nil, false, http1.ErrHeadTimeout
				}
				return nil, false, fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
			}
			continue
		}
		st, err := k.st.SocketState(u.cookie)
		if err != nil {
			return nil, false, err
		}
		mine := st.Gen == gen
		if n > 0 && mine && st.DoneGen == gen && st.HaltGen != gen {
			// The response's last byte, which the kernel passed
			// after it carried the rest.
			return k.relayTail(x, u, st, buf[:n], rerr, uc)
		}
		if n > 0 && (!mine || st.Redirected == 0) {
			// Nothing of this response was carried: it is the shim's
			// from its first byte (a head to rewrite or judge, no
			// credit, an arm that came late).
			x.Upstream.Pending = append([]byte(nil), buf[:n]...)
			return nil, false, nil
		}
		if n > 0 {
			// The kernel carried the head and part of the body, then
			// stopped (credit, framing): the shim goes on from where
			// it stopped.
			resp := k.carriedSoFar(x, st)
			n, err := finishInUser(x, frameFromKernel(st.Fr), buf[:n], rerr)
			x.BodyBytesDown += n
			uc.down.Add(uint64(n))
			resp.Reusable = false
			return resp, true, err
		}
		// EOF or a reset, and no byte with it.
		switch {
		case !mine && st.Seen == u.ctl.ArmAt && isReset(rerr):
			return nil, false, datapath.ErrNoResponse
		case mine && st.Fr.Phase == maps.PhaseUntilClose && errors.Is(rerr, io.EOF):
			// A body delimited by the close: the replica's last
			// send completed, carried bytes included, before its FIN.
			return k.carriedSoFar(x, st), true, nil
		case errors.Is(rerr, io.EOF):
			return nil, false, io.ErrUnexpectedEOF
		}
		return nil, false, rerr
	}
}

// relayTail writes the tail of a response the kernel carried but for its
// last bytes (st.EndAt is where it ends): got is what the upstream read
// brought (with err), the rest is read here. The carried bytes are on the
// client socket already, so the tail lands after them.
func (k *MsgPath) relayTail(x *datapath.Exchange, u *msgUpstream, st maps.SockState, got []byte, err error, uc *byteCounters) (*http1.ResponseHead, bool, error) {
	length := st.EndAt - u.ctl.ArmAt
	resp := carriedHead(st, length)
	x.FirstByteAt = k.kernelTime(st.FirstNs)
	need := int(length - st.Redirected)
	tail := append([]byte(nil), got...)
	for len(tail) < need && err == nil {
		b := make([]byte, need-len(tail))
		_ = x.Upstream.SetReadDeadline(time.Now().Add(x.Idle))
		var n int
		n, err = x.Upstream.TCPConn.Read(b)
		tail = append(tail, b[:n]...)
	}
	_ = x.Upstream.SetReadDeadline(time.Time{})
	if len(tail) < need {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return resp, true, err
	}
	// Counted first: the client may read the tail, and look at the
	// counters, before this goroutine runs again.
	x.BodyBytesDown += int64(length - st.HeadLen)
	uc.down.Add(uint64(need))
	if _, werr := x.Client.WriteAll(x.Idle, tail[:need]); werr != nil {
		return resp, true, werr
	}
	// The next response starts after this one's last byte. Bytes past
	// the end, or the replica's close, came with it: the connection
	// serves no other exchange.
	u.next, u.nextKnown = st.EndAt, true
	if len(tail) > need || err != nil {
		resp.Reusable, u.nextKnown = false, false
	}
	return resp, true, nil
}

// isReset reports an upstream that closed (FIN) or reset the connection.
func isReset(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// carriedSoFar is the head of a response the kernel carried, its end
// not found (it halted, or the body ends with the close), and gives x the
// kernel's first-byte time and the body bytes it carried.
func (k *MsgPath) carriedSoFar(x *datapath.Exchange, st maps.SockState) *http1.ResponseHead {
	x.FirstByteAt = k.kernelTime(st.FirstNs)
	x.BodyBytesDown += int64(st.Redirected - st.HeadLen)
	return carriedHead(st, 0)
}

// carriedHead is the response head the kernel parsed (the shim never saw
// it): what the shim needs of it for its counters and its connections.
// length is the whole response's, when the kernel found its end (0: not).
func carriedHead(st maps.SockState, length uint64) *http1.ResponseHead {
	r := &http1.ResponseHead{Version: "HTTP/1.1", Status: int(st.Status), Reusable: true}
	switch {
	case st.HeadLen > 0 && st.Fr.Phase == maps.PhaseDone && length == st.HeadLen:
		r.Framing = http1.FramingNone // no body: HEAD, 204, 304, Content-Length: 0
	case st.HeadFlags&maps.HeadChunked != 0:
		r.Framing = http1.FramingChunked
	case st.HeadFlags&maps.HeadLength != 0:
		r.Framing, r.ContentLength = http1.FramingLength, int64(st.ContentLength)
	default:
		r.Framing, r.Reusable = http1.FramingClose, false
	}
	return r
}

// finishInUser relays the rest of a response the kernel stopped carrying:
// first (read from the upstream with err), then what follows, by framing
// fr from where the kernel's parser stopped. The kernel's bytes are on
// the client socket already (a redirect completes inside the replica's
// send), so nothing is overtaken.
func finishInUser(x *datapath.Exchange, fr bodyFrame, first []byte, err error) (int64, error) {
	var total int64
	up := x.Upstream.TCPConn
	defer up.SetReadDeadline(time.Time{})
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	data := first
	for {
		if len(data) > 0 {
			n, ferr := fr.Feed(data)
			if ferr != nil {
				return total, ferr
			}
			if _, werr := x.Client.WriteAll(x.Idle, data[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if fr.Done() {
			return total, nil
		}
		if err != nil {
			if fr.untilClose() && errors.Is(err, io.EOF) {
				return total, nil
			}
			if errors.Is(err, io.EOF) {
				return total, io.ErrUnexpectedEOF
			}
			return total, err
		}
		deadline := time.Now().Add(x.Idle)
		_ = up.SetReadDeadline(deadline)
		var n int
		n, err = up.Read(buf)
		data = buf[:n]
		if n == 0 && isTimeout(err) {
			if time.Now().Before(deadline) {
				err = nil // a wake that raced the end of the wait
				continue
			}
			return total, fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
		}
	}
}
