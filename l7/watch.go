package l7

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// clientWatch notices a client that goes away while its request waits
// (parked by admission, or its response pending: closed the tab, Ctrl-C in
// the agent). Without it the shim would learn of it only when it next
// writes, after the replica's whole prefill, and the request would count
// as in flight all that time. It reads the client connection in the
// background; EOF or an error means gone, and onGone runs (the response
// watch closes the upstream connection, so the relay ends now and vLLM
// aborts the request). Bytes that arrive instead (a pipelined next
// request) end the watch; stop hands them back.
type clientWatch struct {
	client   *Conn
	onGone   func()
	finOK    bool // a FIN is not leaving: see watchResponse
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
	got      []byte
}

// watchResponse watches while a response is pending. lastRequest: the
// client said this is its last request (HTTP/1.0 without keep-alive, or
// Connection: close), so it may shut down its sending side and wait for
// the answer, as `nc -N`, socat and old HTTP/1.0 clients do; its FIN then
// ends the watch without counting as gone. A client that closed for good
// answers the shim's next write with a reset, which ends the exchange
// then (and a reset seen here still counts at once).
func watchResponse(client, upstream *Conn, lastRequest bool) *clientWatch {
	return watchClient(client, func() { upstream.Close() }, lastRequest)
}

func watchClient(client *Conn, onGone func(), finOK bool) *clientWatch {
	w := &clientWatch{client: client, onGone: onGone, finOK: finOK, done: make(chan struct{})}
	_ = client.SetReadDeadline(time.Time{})
	go w.run()
	return w
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
	if w.stopping.Load() || (errors.As(err, &ne) && ne.Timeout()) || (w.finOK && errors.Is(err, io.EOF)) {
		return
	}
	w.gone.Store(true)
	w.onGone()
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
