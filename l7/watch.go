package l7

import (
	"errors"
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
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
	got      []byte
}

// watchResponse watches while a response is pending.
func watchResponse(client, upstream *Conn) *clientWatch {
	return watchClient(client, func() { upstream.Close() })
}

func watchClient(client *Conn, onGone func()) *clientWatch {
	w := &clientWatch{client: client, onGone: onGone, done: make(chan struct{})}
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
	if w.stopping.Load() || (errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	w.gone.Store(true)
	w.onGone()
}

// peerGone reports, without reading anything, whether the client has
// closed or reset its connection: the socket has left ESTABLISHED (FIN
// received: CLOSE_WAIT; reset: CLOSE). Used while a request is parked,
// when its body (or, with a peeked head, the head itself) must stay
// unread in the socket.
func peerGone(c *Conn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		gone = err != nil || info.State != tcpEstablished
	})
	return gone
}

// tcpEstablished is TCP_ESTABLISHED of include/net/tcp_states.h.
const tcpEstablished = 1

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
