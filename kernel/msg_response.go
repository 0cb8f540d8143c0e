package kernel

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
)

// ArmResponse implements l7.ResponseCarrier: before the request goes out,
// the replica's end of x.Upstream is armed to carry the response to the
// client socket, at most credit bytes of it.
func (k *MsgPath) ArmResponse(x *l7.Exchange) (bool, error) {
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
	ctl := maps.SockCtl{Peer: cc, ArmAt: at, Credit: cr, Gen: u.gen + 1, Mode: maps.ModeReply, Replica: slot}
	if x.Request.Method == "HEAD" {
		ctl.Flags |= maps.CtlNoBody
	}
	if err := k.st.Arm(u.cookie, ctl); err != nil {
		return false, err
	}
	u.gen, u.armAt, u.nextKnown, u.ctl = ctl.Gen, at, false, ctl
	u.armed.Store(true)
	return true, nil
}

// disarmSettle is how long Disarm waits for a run of lmw_reply that read
// the old arm (it lasts microseconds) to have finished before it looks at
// what was carried: only the rare paths that write to the client
// themselves pay it.
const disarmSettle = time.Millisecond

// Disarm implements l7.ResponseCarrier: the same arm with CTL_HANDOFF,
// which the kernel honours only before it carried a byte of the response.
func (k *MsgPath) Disarm(x *l7.Exchange) bool {
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

// AnsweredEarly implements l7.ResponseCarrier: the replica has sent
// something of its response (the kernel saw it, or it waits upstream).
func (k *MsgPath) AnsweredEarly(x *l7.Exchange) bool {
	u, ok := x.Upstream.Datapath.(*msgUpstream)
	if !ok {
		return false
	}
	st, err := k.st.SocketState(u.cookie)
	return err == nil && st.Gen == u.gen
}

// AwaitResponse implements l7.ResponseCarrier.
func (k *MsgPath) AwaitResponse(x *l7.Exchange) (*l7.ResponseHead, bool, error) {
	u := x.Upstream.Datapath.(*msgUpstream)
	_, uc, err := k.slot(x)
	if err != nil {
		return nil, false, err
	}
	ends := make(chan maps.ResponseEnd, 2)
	if err := k.ends.watch(u.cookie, ends); err != nil {
		return nil, false, err
	}
	defer k.ends.unwatch(u.cookie)
	// The replica's FIN or RST, and any byte the kernel did not carry,
	// reach the shim on the upstream socket: one read there sees them.
	w := watchUpstream(x.Upstream.TCPConn)
	stopped := false
	defer func() {
		if !stopped {
			w.stop()
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastProgress, lastSeen := time.Now(), uint64(0)
	// A response that ended before the watch above began wrote its
	// record to nobody: its end is in sock_state (written first).
	if st, err := k.st.SocketState(u.cookie); err == nil && st.Gen == u.gen && st.DoneGen == u.gen {
		ends <- maps.ResponseEnd{Cookie: u.cookie, Gen: u.gen, Bytes: st.Redirected}
	}
	for {
		select {
		case ev := <-ends:
			if ev.Gen != u.gen {
				continue
			}
			st, err := k.st.SocketState(u.cookie)
			if err != nil {
				return nil, false, err
			}
			resp := carriedHead(st)
			x.FirstByteAt = k.kernelTime(st.FirstNs)
			x.BodyBytesDown += int64(ev.Bytes - st.HeadLen)
			stopped = true
			clean := w.stop()
			resp.Reusable = resp.Reusable && clean
			u.next, u.nextKnown = u.armAt+ev.Bytes, clean
			return resp, true, nil
		case r := <-w.out:
			st, err := k.st.SocketState(u.cookie)
			if err != nil {
				return nil, false, err
			}
			mine := st.Gen == u.gen
			if len(r.data) > 0 && (!mine || st.Redirected == 0) {
				// Nothing of this response was carried: it is the
				// shim's from its first byte (a head to rewrite or
				// judge, no credit, an arm that came late).
				stopped = true
				data, _ := w.collect()
				x.Upstream.Pending = append(r.data, data...)
				return nil, false, nil
			}
			if len(r.data) > 0 {
				// The kernel carried the head and part of the body,
				// then stopped (credit, framing): the shim goes on
				// from where it stopped.
				resp := carriedHead(st)
				x.FirstByteAt = k.kernelTime(st.FirstNs)
				x.BodyBytesDown += int64(st.Redirected - st.HeadLen)
				stopped = true
				n, err := finishInUser(x, w, frameFromKernel(st.Fr), r)
				x.BodyBytesDown += n
				uc.down.Add(uint64(n))
				resp.Reusable = false
				return resp, true, err
			}
			// EOF or a reset, and no byte with it.
			switch {
			case !mine && st.Seen == u.armAt && isReset(r.err):
				return nil, false, l7.ErrNoResponse
			case mine && st.Fr.Phase == maps.PhaseUntilClose && errors.Is(r.err, io.EOF):
				// A body delimited by the close: the replica's last
				// send completed, carried bytes included, before its FIN.
				resp := carriedHead(st)
				x.FirstByteAt = k.kernelTime(st.FirstNs)
				x.BodyBytesDown += int64(st.Redirected - st.HeadLen)
				return resp, true, nil
			case errors.Is(r.err, io.EOF):
				return nil, false, io.ErrUnexpectedEOF
			}
			return nil, false, r.err
		case <-tick.C:
			st, _ := k.st.SocketState(u.cookie)
			if st.Gen == u.gen && st.Seen != lastSeen {
				lastProgress, lastSeen = time.Now(), st.Seen
			} else if time.Since(lastProgress) > x.Idle {
				if st.Gen != u.gen {
					return nil, false, l7.ErrHeadTimeout
				}
				return nil, false, fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
			}
		}
	}
}

// isReset reports an upstream that closed (FIN) or reset the connection.
func isReset(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// carriedHead is the response head the kernel parsed (the shim never saw
// it): what the shim needs of it for its counters and its connections.
func carriedHead(st maps.SockState) *l7.ResponseHead {
	r := &l7.ResponseHead{Version: "HTTP/1.1", Status: int(st.Status), Reusable: true}
	switch {
	case st.HeadLen > 0 && st.Fr.Phase == maps.PhaseDone && st.Redirected == st.HeadLen:
		r.Framing = l7.FramingNone // no body: HEAD, 204, 304, Content-Length: 0
	case st.HeadFlags&maps.HeadChunked != 0:
		r.Framing = l7.FramingChunked
	case st.HeadFlags&maps.HeadLength != 0:
		r.Framing, r.ContentLength = l7.FramingLength, int64(st.ContentLength)
	default:
		r.Framing, r.Reusable = l7.FramingClose, false
	}
	return r
}

// finishInUser relays the rest of a response the kernel stopped carrying:
// first (what the upstream watch read), then what follows, by framing fr
// from where the kernel's parser stopped. The kernel's bytes are on the
// client socket already (a redirect completes inside the replica's send),
// so nothing is overtaken.
func finishInUser(x *l7.Exchange, w *upWatch, fr bodyFrame, first upRead) (int64, error) {
	var total int64
	idle := time.NewTimer(x.Idle)
	defer idle.Stop()
	defer w.stop()
	r := first
	for {
		if len(r.data) > 0 {
			n, err := fr.Feed(r.data)
			if err != nil {
				return total, err
			}
			if _, err := x.Client.WriteAll(x.Idle, r.data[:n]); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if fr.Done() {
			return total, nil
		}
		if r.err != nil {
			if fr.untilClose() && errors.Is(r.err, io.EOF) {
				return total, nil
			}
			if errors.Is(r.err, io.EOF) {
				return total, io.ErrUnexpectedEOF
			}
			return total, r.err
		}
		idle.Reset(x.Idle)
		select {
		case r = <-w.out:
		case <-idle.C:
			return total, fmt.Errorf("kernel datapath: response stalled: %w", errIdle)
		}
	}
}
