package kernel

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// MsgPath is the sk_msg Datapath (docs/kernel.md), the fast one. The
// replica's end of every upstream connection the warden opens is paired
// in the kernel (lmw_pair puts it into lmw_replica_socks as the replica
// accepts it); for each exchange the shim arms it with the client socket
// as peer, and lmw_reply, which runs inside the replica's own sendmsg,
// moves the whole response — head included — straight to the client
// socket's egress, following its framing to the end, and passes the
// response's last byte to the shim, which relays it and so counts the
// exchange done before the client can send its next request. Nothing else
// of the response crosses the loopback connection or userspace; the shim
// is woken once per response.
//
// Request bodies cross userspace (splice(2), or one writev with the head):
// the shortest way measured (docs/kernel.md). A response the kernel will
// not carry (a head the shim must rewrite or judge, a client socket whose
// send buffer is full, a replica whose socket did not pair) goes the
// ordinary way through the upstream socket, and the shim relays it as in
// user mode — from its first byte, or from where the kernel stopped.
type MsgPath struct {
	st *maps.State
	counters
	user *datapath.UserPath
	log  *slog.Logger
	// sndbuf is the send buffer a client socket gets when it joins
	// lmw_client_socks (half of the credit of one response).
	sndbuf int

	mu     sync.Mutex
	noPair map[string]bool // replica addresses already reported as unpaired

	fb msgFallback // stopped arming: a response's end went missing

	// clock maps the kernel's CLOCK_MONOTONIC (sock_state.first_ns) to
	// wall time: both readings taken together at the start.
	clockAt time.Time
	clockNs int64
}

// pairWait bounds how long the arm of a fresh upstream connection waits
// for its replica end to pair: lmw_pair runs when the replica's kernel
// takes the handshake's last ACK, on loopback before connect returns.
const pairWait = 5 * time.Millisecond

// NewMsgPath returns the sk_msg datapath over state loaded in maps.ModeMsg.
// Its upstream connections must be opened by a Dialer with Pair set (its
// DialTCP is the l7.Upstreams dial function).
func NewMsgPath(st *maps.State, log *slog.Logger) *MsgPath {
	if log == nil {
		log = slog.Default()
	}
	k := &MsgPath{st: st, counters: newCounters(st), user: datapath.NewUserPath(),
		log: log, sndbuf: clientSendBuffer(), noPair: map[string]bool{}}
	k.counters.fallbacks = k.fb.count.Load
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		k.clockAt, k.clockNs = time.Now(), ts.Nano()
	}
	return k
}

// kernelTime is the time of a kernel CLOCK_MONOTONIC reading (zero if
// there is none).
func (k *MsgPath) kernelTime(ns uint64) time.Time {
	if ns == 0 || k.clockAt.IsZero() {
		return time.Time{}
	}
	return k.clockAt.Add(time.Duration(int64(ns) - k.clockNs))
}

// Name implements datapath.Datapath.
func (k *MsgPath) Name() string { return "msg" }

// State is the pinned kernel state the path uses.
func (k *MsgPath) State() *maps.State { return k.st }

// Collector is the path's Prometheus collector.
func (k *MsgPath) Collector() prometheus.Collector { return collector{&k.counters} }

// Close implements io.Closer; the path holds nothing of its own to
// release (the pinned state is the caller's).
func (k *MsgPath) Close() error { return nil }

// RelayRequestBody implements datapath.Datapath: the body crosses userspace.
func (k *MsgPath) RelayRequestBody(x *datapath.Exchange) error {
	_, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	err = k.user.RelayRequestBody(x)
	// All of it crossed userspace, the part sent with the head included.
	uc.up.Add(uint64(x.BodyBytesUp))
	return err
}

// RelayResponseBody implements datapath.Datapath for a response the kernel
// handed to the shim from its first byte: relayed in userspace.
func (k *MsgPath) RelayResponseBody(x *datapath.Exchange) error {
	_, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	before := x.BodyBytesDown
	err = k.user.RelayResponseBody(x)
	uc.down.Add(uint64(x.BodyBytesDown - before))
	if u, ok := x.Upstream.Datapath.(*msgUpstream); ok {
		u.nextKnown = false // the kernel saw these bytes pass: read its offset at the next arm
	}
	return err
}

// unpaired reports, once per replica address, that its sockets do not
// pair (the replica is not in this host's cgroup v2 hierarchy, or is
// behind NAT or a proxy): its responses cross userspace.
func (k *MsgPath) unpaired(addr string) {
	k.mu.Lock()
	first := !k.noPair[addr]
	k.noPair[addr] = true
	k.mu.Unlock()
	if first {
		k.log.Warn("sk_msg datapath: the replica's end of the warden's connection did not pair; its responses cross userspace",
			"replica", addr, "why", "the replica's sockets are not under the cgroup v2 hierarchy the warden attached to, or a NAT or proxy is in between (the accepted socket's addresses are not the warden's connection's)")
	}
}

// Capabilities implements datapath.Datapath: the sk_msg datapath sets a
// client connection up before its first head, carries whole responses,
// and says where a cut response stands.
func (k *MsgPath) Capabilities() datapath.Capabilities {
	return datapath.Capabilities{ConnPreparer: k, Carrier: k, Cutter: k}
}

var (
	_ datapath.Datapath        = (*MsgPath)(nil)
	_ datapath.ResponseCarrier = (*MsgPath)(nil)
	_ datapath.ConnPreparer    = (*MsgPath)(nil)
	_ datapath.ResponseCutter  = (*MsgPath)(nil)
)
