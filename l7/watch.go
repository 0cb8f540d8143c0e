package l7

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// clientWatch notices a client that goes away while its response is
// pending (closed the tab, Ctrl-C in the agent): without it the shim would
// learn of it only when it next writes, after the replica's whole prefill,
// and the request would count as in flight all that time. It does one
// background read on the client connection; EOF or an error means gone,
// and the upstream connection is closed so the relay ends now and vLLM
// aborts the request. Bytes that arrive instead (a pipelined next request)
// are kept and handed back by stop.
type clientWatch struct {
	client   *Conn
	upstream *Conn
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
	got      []byte
}

func watchClient(client, upstream *Conn) *clientWatch {
	w := &clientWatch{client: client, upstream: upstream, done: make(chan struct{})}
	_ = client.SetReadDeadline(time.Time{})
	go w.run()
	return w
}

func (w *clientWatch) run() {
	defer close(w.done)
	buf := make([]byte, 1024)
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
	w.upstream.Close()
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
