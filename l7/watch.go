package l7

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
// tells them apart: a closed socket answers data with a reset. So:
//   - an HTTP/1.1 client whose response head has not been written yet is
//     sent "100 Continue" (every HTTP/1.1 client must accept an
//     unexpected 1xx) and is gone if its socket answers with a reset;
//     without one it half-closed and is served;
//   - an HTTP/1.0 client cannot be sent a 1xx: one that announced its
//     last request (no keep-alive) may half-close, its FIN ends the watch,
//     and if it did close for good the shim's next write meets the reset
//     and ends the exchange then (after the replica's prefill);
//   - once the response head is written, the response's own bytes are
//     the probe: a client that closed for good answers them with a reset
//     (a streamed response writes every few milliseconds);
//   - otherwise (an HTTP/1.0 keep-alive client before its response) a
//     FIN is leaving.
type clientWatch struct {
	client   *Conn
	onGone   func()
	finOK    bool // a FIN is not leaving (HTTP/1.0, last request)
	probeOK  bool // a FIN may be probed with 100 Continue (HTTP/1.1)
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
	got      []byte

	mu       sync.Mutex // serialises the probe with the shim's writes of heads
	headSent bool       // the final response head is on its way: no 1xx any more
}

// watchResponse watches while the response to h is pending.
func watchResponse(client, upstream *Conn, h *Head) *clientWatch {
	w := &clientWatch{
		client: client, onGone: func() { upstream.Close() },
		finOK:   h.Version == "HTTP/1.0" && !h.KeepAlive,
		probeOK: h.Version == "HTTP/1.1",
		done:    make(chan struct{}),
	}
	_ = client.SetReadDeadline(time.Time{})
	go w.run()
	return w
}

// writeHead writes a response head to the client, never in the middle of
// a probe; final marks the final head (no probe after it).
func (w *clientWatch) writeHead(idle time.Duration, b []byte, final bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.headSent = w.headSent || final
	_, err := w.client.writeAll(idle, b)
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
	if errors.Is(err, io.EOF) && (w.finOK || w.halfClosed()) {
		return
	}
	w.gone.Store(true)
	w.onGone()
}

// probeWait bounds how long a probed client may take to answer with a
// reset: one round trip, generously.
const (
	probeWait = time.Second
	probePoll = 5 * time.Millisecond
)

// halfClosed decides what a client's FIN means (see clientWatch): true if
// it only shut down its sending side (no reset answers the probe, or the
// response's own writes, within probeWait), false if it closed its
// socket or cannot be probed.
func (w *clientWatch) halfClosed() bool {
	w.mu.Lock()
	if !w.headSent {
		if !w.probeOK {
			w.mu.Unlock()
			return false
		}
		_, err := w.client.writeAll(probeWait, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
		if err != nil {
			w.mu.Unlock()
			return false
		}
	}
	w.mu.Unlock()
	for deadline := time.Now().Add(probeWait); time.Now().Before(deadline); time.Sleep(probePoll) {
		if w.stopping.Load() {
			return true // the exchange ended meanwhile: nothing to abort
		}
		if peerGone(w.client, true) {
			return false
		}
	}
	return true
}

// peerGone reports, without reading anything, whether the client has
// closed or reset its connection: the socket has left ESTABLISHED (FIN
// received: CLOSE_WAIT; reset: CLOSE), or with finOK (see watchResponse)
// only a reset. Used while a request is parked, when its body (or, with a
// peeked head, the head itself) must stay unread in the socket.
func peerGone(c *Conn, finOK bool) bool {
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
		case finOK: // only a reset is leaving (see watchResponse)
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
	w.stopping.Store(true)
	_ = w.client.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.client.SetReadDeadline(time.Time{})
	if len(w.got) > 0 {
		w.client.Pending = append(w.client.Pending, w.got...)
	}
	return w.gone.Load()
}
