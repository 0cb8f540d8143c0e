package l7

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// clientWatch notices a client that goes away while its request waits
// (its response pending: closed the tab, Ctrl-C in the agent). Without it
// the shim would learn of it only when it next writes, after the
// replica's whole prefill, and the request would count as in flight all
// that time. It reads the client connection in the background; an error
// (a reset) means gone, and onGone runs (the response watch closes the
// upstream connection, so the relay ends now and vLLM aborts the
// request). Bytes that arrive instead (a pipelined next request) end the
// watch; stop hands them back.
//
// EOF is a FIN, which a client sends when it closes its socket but also
// when it only shuts down its sending side and waits for the answer
// (`nc -N`, socat, scripts that call shutdown(SHUT_WR)). Only a write
// tells them apart: a closed socket answers data with a reset. So after
// a FIN the watch waits for a reset (polling the socket's TCP state) until
// the exchange ends: the response's own writes draw it from a client that
// closed for good, and an HTTP/1.1 client whose response head has not
// gone out yet is sent "100 Continue" at once to draw it (every HTTP/1.1
// client must accept an unexpected 1xx), so that a client that left
// during the replica's prefill is noticed then, not at its first token.
// A client that half-closed draws no reset and gets its whole answer.
type clientWatch struct {
	client  *datapath.Conn
	onGone  func()
	probeOK bool // a FIN may be probed with 100 Continue (HTTP/1.1)
	// beforeProbe, if set, runs before the probe is written and may
	// refuse it (a kernel datapath disarms its carrying of the response;
	// one that has begun writing the response into the client refuses).
	beforeProbe func() bool
	done        chan struct{}
	stopped     chan struct{} // closed by stop: wakes waitReset
	stopping    atomic.Bool
	gone        atomic.Bool
	got         []byte

	mu        sync.Mutex // serialises the probe with the shim's writes of heads
	headSent  bool       // the final response head is on its way: no 1xx any more
	probeSent bool       // the 100 Continue probe went out
}

// watchResponse watches while the response to h is pending; beforeProbe,
// if not nil, runs before a 100 Continue probe (see clientWatch).
func watchResponse(client, upstream *datapath.Conn, h *http1.Head, beforeProbe func() bool) *clientWatch {
	w := &clientWatch{
		client: client, onGone: func() { upstream.Close() },
		probeOK: h.Version == "HTTP/1.1", beforeProbe: beforeProbe,
		done: make(chan struct{}), stopped: make(chan struct{}),
	}
	_ = client.SetReadDeadline(time.Time{})
	go w.run()
	return w
}

// writeHead writes a response head to the client, never in the middle of
// a probe; final marks the final head, after which no 1xx may follow.
func (w *clientWatch) writeHead(idle time.Duration, b []byte, final bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.headSent = w.headSent || final
	_, err := w.client.WriteAll(idle, b)
	return err
}

func (w *clientWatch) run() {
	defer close(w.done)
	buf := make([]byte, 4096)
	n, err := w.client.TCPConn.Read(buf)
	if n > 0 {
		w.got = buf[:n]
		return
	}
	var ne net.Error
	if w.stopping.Load() || (errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	if errors.Is(err, io.EOF) && !w.waitReset() {
		return // half-closed: served to the end
	}
	if !errors.Is(err, io.EOF) && !peerGone(w.client, false) {
		// An error the client did not cause: a socket in a sockmap can
		// report the psock's failure to move bytes towards it (EPIPE
		// when the replica reset mid-stream, measured on 6.18) while
		// the client is still connected. The exchange ends on its own
		// error; the client gets its answer.
		return
	}
	w.gone.Store(true)
	w.onGone()
}

// Polling the TCP state of a client that sent its FIN: soon at first (a
// client that left answers the probe within a round trip), then sparser.
const (
	resetPollMin = 2 * time.Millisecond
	resetPollMax = 100 * time.Millisecond
)

// waitReset waits, after a client's FIN, until its socket answers a write
// with a reset (true: it closed for good) or the exchange ends (false).
func (w *clientWatch) waitReset() bool {
	w.mu.Lock()
	if !w.headSent && w.probeOK && !w.probeSent && (w.beforeProbe == nil || w.beforeProbe()) {
		w.probeSent = true
		_, _ = w.client.WriteAll(time.Second, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
	}
	w.mu.Unlock()
	for pause := resetPollMin; ; pause = min(2*pause, resetPollMax) {
		if peerGone(w.client, true) {
			return true
		}
		select {
		case <-w.stopped:
			return false
		case <-time.After(pause):
		}
	}
}

// peerGone reports, without reading anything, whether the client has
// closed or reset its connection: the socket has left ESTABLISHED (FIN
// received: CLOSE_WAIT; reset: CLOSE), or with resetOnly only a reset.
func peerGone(c *datapath.Conn, resetOnly bool) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		switch {
		case err != nil:
			gone = true
		case resetOnly:
			gone = info.State == tcpClose
		default:
			gone = info.State != tcpEstablished
		}
	})
	return gone
}

// TCP states of include/net/tcp_states.h.
const (
	tcpEstablished = 1
	tcpClose       = 7
)

// stop ends the watch and reports whether the client went away. Bytes the
// watch read are appended to the client's Pending.
func (w *clientWatch) stop() (clientGone bool) {
	if w.stopping.CompareAndSwap(false, true) {
		close(w.stopped)
	}
	_ = w.client.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.client.SetReadDeadline(time.Time{})
	if len(w.got) > 0 {
		w.client.Pending = append(w.client.Pending, w.got...)
	}
	return w.gone.Load()
}
