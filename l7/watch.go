package l7

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// clientWatch notices a client that goes away while its request waits
// (parked by admission, or its response pending: closed the tab, Ctrl-C in
// the agent). Without it the shim would learn of it only when it next
// writes, after the replica's whole prefill, and the request would count
// as in flight all that time. It reads the client connection in the
// background; EOF or an error means gone, and onGone runs (the response
// watch closes the upstream connection, so the relay ends now and vLLM
// aborts the request). Bytes that arrive instead (the body of a parked
// request, a pipelined next request) are kept, up to keep bytes, after
// which the watch stops reading; stop hands them back.
type clientWatch struct {
	client   *Conn
	onGone   func()
	keep     int
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
	got      []byte
}

// watchResponse watches while a response is pending: the first bytes end
// the watch (a pipelined request; nothing more to learn).
func watchResponse(client, upstream *Conn) *clientWatch {
	return watchClient(client, func() { upstream.Close() }, 1)
}

func watchClient(client *Conn, onGone func(), keep int) *clientWatch {
	w := &clientWatch{client: client, onGone: onGone, keep: keep, done: make(chan struct{})}
	_ = client.SetReadDeadline(time.Time{})
	go w.run()
	return w
}

func (w *clientWatch) run() {
	defer close(w.done)
	buf := make([]byte, 4096)
	for len(w.got) < w.keep {
		n, err := w.client.TCPConn.Read(buf)
		if n > 0 {
			w.got = append(w.got, buf[:n]...)
			continue
		}
		var ne net.Error
		if w.stopping.Load() || (errors.As(err, &ne) && ne.Timeout()) {
			return
		}
		w.gone.Store(true)
		w.onGone()
		return
	}
}

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
