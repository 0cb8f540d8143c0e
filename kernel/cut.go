package kernel

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// A response the kernel carried and that was cut (the replica died, or the
// shim ended it as stalled on an unhealthy replica): the shim ends the
// client's stream with the API's error event where the bytes the client
// got end between two chunks (l7/cut.go). Only the kernel knows where
// they end; these read it back, after making sure the kernel writes
// nothing more into the client.

// CutResponse implements datapath.ResponseCutter for the sk_msg datapath. The
// replica's end of the connection may still be alive (a stopped replica
// that is resumed later): its arm goes to pass mode first, so lmw_reply
// carries nothing more to this client, whatever that replica sends.
func (k *MsgPath) CutResponse(x *datapath.Exchange) (datapath.CutState, bool) {
	if x.Upstream == nil {
		return datapath.CutState{}, false
	}
	u, ok := x.Upstream.Datapath.(*msgUpstream)
	if !ok || !u.armed.Load() {
		return datapath.CutState{}, false
	}
	ctl := u.ctl
	ctl.Mode = maps.ModePass
	if err := k.st.Arm(u.cookie, ctl); err != nil {
		return datapath.CutState{Began: true}, true // cannot tell where it stands: close, send nothing
	}
	time.Sleep(disarmSettle) // a run of lmw_reply that read the old arm ends
	st, err := k.st.SocketState(u.cookie)
	if err != nil || st.Gen != u.ctl.Gen || st.Redirected == 0 {
		return datapath.CutState{}, false // the kernel carried nothing of it: the shim's state holds
	}
	cs := datapath.CutState{Began: st.HeadLen > 0 && st.Redirected >= st.HeadLen, Chunked: st.HeadFlags&maps.HeadChunked != 0}
	if cs.Began {
		cs.Status = int(st.Status)
	}
	if st.HaltGen != st.Gen && st.DoneGen != st.Gen { // else the shim went on in userspace from the kernel's halt
		cs.AtBoundary = cs.Chunked && chunkBoundary(st.Fr)
	}
	// lmw_reply writes into the client's socket inside the replica's own
	// send: what it carried is there already, before anything the shim
	// writes now.
	return cs, true
}

// CutResponse implements datapath.ResponseCutter for the sk_skb datapath. The
// shim read the response head; the verdict carried the body from the
// upstream socket. A replica that is still alive (stopped, and resumed
// later) must not have more carried into this client: the arm goes to
// pass mode first. What the verdict redirected may still sit in the
// client's psock backlog: the shim waits until the client's written-byte
// count stops moving.
func (k *SkbPath) CutResponse(x *datapath.Exchange) (datapath.CutState, bool) {
	if x.Upstream == nil || x.Response == nil {
		return datapath.CutState{}, false
	}
	u := k.upstream(x.Upstream)
	if u == nil {
		return datapath.CutState{}, false
	}
	gen, armedFor := u.lastArm()
	if armedFor != x {
		return datapath.CutState{}, false // the shim relayed it all
	}
	ctl := k.st.Ctl(u.cookie)
	if ctl.Mode != maps.ModeResponse || ctl.Gen != gen {
		return datapath.CutState{}, false
	}
	cs := datapath.CutState{Began: true, Chunked: x.Response.Framing == http1.FramingChunked}
	pass := ctl
	pass.Mode = maps.ModePass
	if err := k.st.Arm(u.cookie, pass); err != nil {
		return cs, true // cannot tell where it stands: close, send nothing
	}
	st, err := k.st.SocketState(u.cookie)
	switch {
	case err != nil:
		return cs, true
	case st.Gen == ctl.Gen && st.HaltGen == st.Gen:
		return cs, true // the shim's parser went on from the kernel's halt
	case st.Gen == ctl.Gen:
		cs.AtBoundary = cs.Chunked && chunkBoundary(st.Fr)
	default:
		// Nothing arrived since this arm: the body stands where the shim
		// armed it (everything before, it forwarded itself).
		cs.AtBoundary = cs.Chunked && chunkBoundary(ctl.Start)
	}
	settleWritten(x.Client)
	clearPsockError(x.Client)
	return cs, true
}

// clearPsockError takes the error a psock left on the client socket: when
// the verdict's redirect into it fails (the replica reset mid-stream), the
// psock reports EPIPE on the client's socket although the client is still
// connected (measured on 6.18), and the shim's next write would fail with
// it. Reading SO_ERROR takes it off (the kernel clears it as it reports
// it); a client that really went away still fails the write that follows.
func clearPsockError(c *datapath.Conn) {
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	})
}

// chunkBoundary reports the kernel's parser between two chunks of a
// chunked body (where another chunk may start).
func chunkBoundary(f maps.Frame) bool {
	return http1.ChunkPhase(f.Phase) == http1.ChunkSize && f.Count == 0 && f.Line == 0
}

// settleWritten waits, at most half a second, until the client socket's
// written-byte count has stopped moving: the psock's worker has handed it
// what the verdict redirected.
func settleWritten(c *datapath.Conn) {
	deadline := time.Now().Add(500 * time.Millisecond)
	last, _ := written(c.TCPConn)
	for stable := 0; stable < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		n, err := written(c.TCPConn)
		if err != nil {
			return
		}
		if n == last {
			stable++
		} else {
			stable, last = 0, n
		}
	}
}

var (
	_ datapath.ResponseCutter = (*MsgPath)(nil)
	_ datapath.ResponseCutter = (*SkbPath)(nil)
)
