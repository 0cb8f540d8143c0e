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
	c.Pending = append(c.Pending, q...)
	if err != nil {
		// Reset (a replica that answered early and died): it cannot
		// join; the shim's own relay forwards what it holds and then
		// meets the error itself.
		return 0, fmt.Errorf("%w: %w", errNotJoinable, err)
	}
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

// relayRequestUser moves a request body in userspace (splice); a client in
// the SOCKHASH is read without splice.
func (k *SkbPath) relayRequestUser(x *datapath.Exchange, uc *byteCounters) error {
	cc, err := maps.Cookie(x.Client.TCPConn)
	if err != nil {
		return err
	}
	if !k.st.SocketInMap(cc) {
		err := k.user1.RelayRequestBody(x)
		uc.up.Add(uint64(x.BodyBytesUp)) // all of it crossed the shim, as user mode counts it
		return err
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

// RelayRequestBody implements datapath.Datapath. The shim relays the
// request body itself, as the sk_msg datapath does (splice, or plain reads
// for a client still in the SOCKHASH); only the response is the kernel's.
// Carrying the body too put every request behind the psock worker that
// also sends every response event, and the shim could read the response
// head only once it had seen the whole body land: at 32 streams that wait
// was 3.4 ms p50 and 14 ms p90 of each keep-alive request, with the
// replica's answer already waiting (docs/kernel.md, "Performance").
//
// Both sockets join the SOCKHASH after the body: a new upstream socket
// stays plain until then, so a replica that answers before it read the
// whole body and resets the connection leaves its answer readable there
// (a socket in the SOCKHASH loses what its psock holds as it closes).
func (k *SkbPath) RelayRequestBody(x *datapath.Exchange) error {
	slot, uc, err := k.slot(x)
	if err != nil {
		return err
	}
	cc, err := maps.Cookie(x.Client.TCPConn)
	if err != nil {
		return err
	}
	// A head the shim only peeked is still in the socket: read it first,
	// or the copy would send it as the body, and the connection's next
	// head would be this one again.
	if size, ok := k.takePeeked(cc); ok {
		if err := readExactly(x.Client.TCPConn, size, x.Idle); err != nil {
			return err
		}
	}
	if err := k.relayRequestUser(x, uc); err != nil {
		return err
	}
	// Only established sockets may join a sockmap: with a client that
	// half-closed, or an upstream that closed, the response crosses
	// userspace too. The client joins before the shim's client watch
	// starts reading it: joined later, while that read waited, it never
	// got the carried response (the self-test's stream: 0 bytes, 6.18).
	err = errNotJoinable
	if k.st.SocketInMap(cc) || established(x.Client.TCPConn) {
		if _, err = k.joinUpstream(x.Upstream, slot); err == nil {
			_, err = k.join(x.Client, slot)
		}
	}
	if errors.Is(err, errNotJoinable) {
		k.mu.Lock()
		k.userX[x] = true
		k.mu.Unlock()
		return nil
	}
	return err
}

// PlainUpstream implements datapath.EarlyAnswerReader: an upstream socket
// is plain until it first joins the SOCKHASH (after a request body), and
// a pooled one stays in.
func (k *SkbPath) PlainUpstream(x *datapath.Exchange) bool {
	return k.upstream(x.Upstream) == nil
}

// readExactly consumes n bytes the shim already peeked.
func readExactly(c *net.TCPConn, n int, idle time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(idle))
	defer c.SetReadDeadline(time.Time{})
	_, err := io.ReadFull(c, make([]byte, n))
	return err
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
	return datapath.Capabilities{HeadReader: k, HeadWaiter: k, Queued: k, Cutter: k, EarlyReader: k}
}

var (
	_ datapath.Datapath          = (*SkbPath)(nil)
	_ datapath.HeadReader        = (*SkbPath)(nil)
	_ datapath.HeadWaiter        = (*SkbPath)(nil)
	_ datapath.QueuedRequest     = (*SkbPath)(nil)
	_ datapath.ResponseCutter    = (*SkbPath)(nil)
	_ datapath.EarlyAnswerReader = (*SkbPath)(nil)
)
