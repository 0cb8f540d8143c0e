package kernel

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// The sk_msg datapath trusts the kernel with a response only while the
// kernel does what lmw_reply asks: carry all of it but its last byte,
// which reaches the shim. A kernel that loses that byte, or carries it
// to the client as well (6.12 did until lmw_reply sent it on itself),
// leaves an exchange the shim never sees end: the client's next request
// on its connection would wait for it forever. When a wait finds the
// kernel past a response's end and no last byte after tailBound, the
// path falls back: from then on no exchange is armed, and the shim
// relays every response itself over the same connections, as for a
// replica that does not pair. It is counted
// (lmwarden_datapath_fallbacks_total), logged once, and said by
// Fallback (lmwarden_datapath_info). The check runs only on the waits'
// stallCheck wakes, which a response that long has anyway: nothing on
// the hot path but one atomic load per arm.

// tailBound is how long after a wait found the kernel past a response's
// end the shim waits for its last byte. The kernel passes it in the same
// send as the rest, so it is there within microseconds.
const tailBound = 2 * stallCheck

// errTailLost: the kernel found the response's end, and its last byte
// reached neither the shim nor, by the kernel's count, the client.
var errTailLost = errors.New("kernel datapath: the response's last byte was lost")

// msgFallback is the sk_msg datapath's run-time fallback state.
type msgFallback struct {
	reason atomic.Pointer[string]
	count  atomic.Uint64
	// faultFrom: fault injection for tests (FaultCarryEnd): arms numbered
	// from this one on carry the response's end too (0: none).
	faultFrom atomic.Uint64
	arms      atomic.Uint64
}

// Fallback says why the path stopped arming exchanges ("" while it arms
// them) and how many times a response's end went missing.
func (k *MsgPath) Fallback() (reason string, count uint64) {
	if r := k.fb.reason.Load(); r != nil {
		reason = *r
	}
	return reason, k.fb.count.Load()
}

// FaultCarryEnd is fault injection for tests: from the from-th arm on
// (1: the next), lmw_reply carries each response's last byte to the
// client as well (CTL_FAULT_CARRY_END), as a kernel that ignores the
// tail's pass would.
func (k *MsgPath) FaultCarryEnd(from uint64) {
	k.fb.faultFrom.Store(k.fb.arms.Load() + from)
}

// faultFlags is what the fault injection adds to an arm (0 but in tests).
func (k *MsgPath) faultFlags() uint32 {
	f := k.fb.faultFrom.Load()
	if f == 0 || k.fb.arms.Add(1) < f {
		return 0
	}
	return maps.CtlFaultCarryEnd
}

// fallBack stops the path from arming exchanges, with the reason.
func (k *MsgPath) fallBack(why string) {
	k.fb.count.Add(1)
	if k.fb.reason.CompareAndSwap(nil, &why) {
		k.log.Error("sk_msg datapath: falling back to the shim's relay for every response from now on", "why", why)
	}
}

// tailLost ends an exchange whose response the kernel carried to its end
// (by its framing) but whose last byte never reached the shim. When the
// kernel carried every byte (the last one included), the client has the
// whole response: the exchange is done, and only its upstream connection
// goes. Otherwise the response is cut.
func (k *MsgPath) tailLost(x *datapath.Exchange, u *msgUpstream, st maps.SockState) (*http1.ResponseHead, bool, error) {
	length := st.EndAt - u.ctl.ArmAt
	k.fallBack(fmt.Sprintf("the kernel carried a response to its end (%d bytes, %d of them to the client) and its last byte did not reach the shim within %s",
		length, st.Redirected, tailBound))
	u.nextKnown = false
	if st.Redirected >= length {
		resp := carriedHead(st, length)
		resp.Reusable = false
		x.FirstByteAt = k.kernelTime(st.FirstNs)
		x.BodyBytesDown += int64(length - st.HeadLen)
		return resp, true, nil
	}
	resp := k.carriedSoFar(x, st)
	resp.Reusable = false
	return resp, true, fmt.Errorf("%w (%d of %d bytes carried)", errTailLost, st.Redirected, length)
}

// armsStopped reports whether the path fell back (no more arms).
func (k *MsgPath) armsStopped() bool { return k.fb.reason.Load() != nil }
