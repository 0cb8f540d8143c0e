package kernel

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// Upstream connections in kernel mode stay in the SOCKHASH from their
// first exchange until they close, and go back to the shim's pool between
// exchanges like in user mode (docs/kernel.md, "The sk_skb datapath"). Between
// two exchanges such a socket is in RESPONSE mode with its response done,
// which the verdict treats as pass mode: the next response head reaches the
// shim, whichever client it is for. The next exchange re-arms it (a new
// gen, a new peer) at the stream offset the shim has read up to.

// upstreamState is what the kernel path remembers of an upstream socket
// that joined the SOCKHASH. Only the exchange that holds the connection
// uses it (a pooled connection belongs to nobody).
type upstreamState struct {
	cookie uint64
	// mu guards gen and armedFor: the relay arms, and the stall watcher's
	// cut (CutResponse) reads them from another goroutine.
	mu  sync.Mutex
	gen uint32 // the last RESPONSE arm's gen (the shim alone writes sock_ctls)
	// armedFor is the exchange whose response that arm carries: a pooled
	// connection keeps its last exchange's arm until the next one.
	armedFor *datapath.Exchange
	// want is the written-byte count the last carried request body
	// reaches once the kernel's bytes have landed (0: nothing pending);
	// checked before the connection is pooled, off the first byte's path.
	want uint64
}

// nextGen starts a new RESPONSE arm's gen for x's response and returns it.
func (u *upstreamState) nextGen(x *datapath.Exchange) uint32 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.gen++
	u.armedFor = x
	return u.gen
}

// lastArm is the last RESPONSE arm's gen and the exchange it carries.
func (u *upstreamState) lastArm() (uint32, *datapath.Exchange) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gen, u.armedFor
}

// joinUpstream puts an upstream socket into the SOCKHASH once, in pass
// mode, and remembers it: a pooled one comes back already in.
func (k *SkbPath) joinUpstream(c *datapath.Conn, slot uint32) (*upstreamState, error) {
	if u := k.upstream(c); u != nil {
		return u, nil
	}
	cookie, err := k.join(c, slot)
	if err != nil {
		return nil, err
	}
	u := &upstreamState{cookie: cookie, gen: k.st.Ctl(cookie).Gen}
	k.mu.Lock()
	k.ups[c.TCPConn] = u
	k.mu.Unlock()
	return u, nil
}

// upstream returns the state of c if it joined the SOCKHASH, else nil.
func (k *SkbPath) upstream(c *datapath.Conn) *upstreamState {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ups[c.TCPConn]
}

// forgetClosedUpstreams drops the records of upstream sockets that left
// the SOCKHASH (closing a socket removes it).
func (k *SkbPath) forgetClosedUpstreams() {
	k.mu.Lock()
	cs := make(map[*net.TCPConn]uint64, len(k.ups))
	for c, u := range k.ups {
		cs[c] = u.cookie
	}
	k.mu.Unlock()
	for c, cookie := range cs {
		if !k.st.SocketInMap(cookie) {
			k.mu.Lock()
			delete(k.ups, c)
			k.mu.Unlock()
		}
	}
}

// landed reports whether the request body bytes the kernel carried to
// the upstream have all been queued there, so that the next request head
// the shim writes on this connection cannot overtake them. Once the
// response has ended they have, in practice; the wait is a safety net.
func (k *SkbPath) landed(x *datapath.Exchange, u *upstreamState) bool {
	want := u.want
	u.want = 0
	if want == 0 {
		return true
	}
	return waitWritten(x.Upstream.TCPConn, want, time.Second) == nil
}

// relayResponsePlain forwards a response body by its framing with plain
// reads: the userspace fallback for an upstream that sits in the SOCKHASH
// (pooled), whose bytes splice(2) cannot see (the verdict moves them off
// the TCP queue).
func relayResponsePlain(x *datapath.Exchange, fr bodyFrame) (int64, error) {
	n, err := relayPlain(x.Client, x.Upstream, &fr, x.Idle)
	if fr.untilClose() && errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil // the close ends this body
	}
	return n, err
}
