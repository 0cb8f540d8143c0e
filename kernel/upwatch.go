package kernel

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// upWatch reads the upstream while sk_skb carries its response: a FIN
// or RST is not carried across a redirect, so only a read notices it; it
// also gets the segment the verdict passes (the response's tail, or
// everything if the arm failed). stop ends it without losing a byte
// unnoticed, so that the connection can be pooled.
type upWatch struct {
	c        *net.TCPConn
	out      chan upRead
	quit     chan struct{}
	done     chan struct{}
	stopping atomic.Bool
	lost     atomic.Bool // it read bytes nobody took
}

type upRead struct {
	data []byte
	err  error
}

func watchUpstream(c *net.TCPConn) *upWatch {
	w := &upWatch{c: c, out: make(chan upRead, 8), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *upWatch) run() {
	defer close(w.done)
	for {
		buf := make([]byte, 32<<10)
		n, err := w.c.Read(buf)
		if n == 0 && err == nil {
			continue
		}
		if n == 0 && w.stopping.Load() {
			return // the deadline stop set
		}
		select {
		case w.out <- upRead{data: buf[:n], err: err}:
		case <-w.quit:
			if n > 0 {
				w.lost.Store(true)
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// stop ends the watch; clean is false if the connection must not be
// reused: it read bytes nobody took, or hit an error or EOF.
func (w *upWatch) stop() (clean bool) {
	w.stopping.Store(true)
	close(w.quit)
	_ = w.c.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.c.SetReadDeadline(time.Time{})
	clean = !w.lost.Load()
	for {
		select {
		case r := <-w.out:
			if len(r.data) > 0 || (r.err != nil && !isTimeout(r.err)) {
				clean = false
			}
		default:
			return clean
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
