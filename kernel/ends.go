package kernel

import (
	"errors"
	"os"
	"sync"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/lmwarden/lmwarden/maps"
)

// endWaiters fans the lmw_response_ends ring buffer out to the exchanges
// waiting for their response (or request body) to end, by socket cookie.
// One reader goroutine per datapath, started by the first watch.
type endWaiters struct {
	st   *maps.State
	once sync.Once
	err  error
	mu   sync.Mutex
	rd   *ringbuf.Reader
	by   map[uint64]chan maps.ResponseEnd
}

// watch delivers the records of cookie to ch (dropped when ch is full)
// until unwatch.
func (w *endWaiters) watch(cookie uint64, ch chan maps.ResponseEnd) error {
	w.once.Do(func() {
		w.by = map[uint64]chan maps.ResponseEnd{}
		w.rd, w.err = w.st.ResponseEnds()
		if w.err == nil {
			go w.run()
		}
	})
	if w.err != nil {
		return w.err
	}
	w.mu.Lock()
	w.by[cookie] = ch
	w.mu.Unlock()
	return nil
}

func (w *endWaiters) unwatch(cookie uint64) {
	w.mu.Lock()
	delete(w.by, cookie)
	w.mu.Unlock()
}

func (w *endWaiters) run() {
	for {
		rec, err := w.rd.Read()
		if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		ev, ok := maps.DecodeResponseEnd(rec)
		if !ok {
			continue
		}
		w.mu.Lock()
		ch := w.by[ev.Cookie]
		w.mu.Unlock()
		if ch != nil {
			select {
			case ch <- ev:
			default: // nobody listening any more (closing): drop
			}
		}
	}
}

func (w *endWaiters) close() {
	if w.rd != nil {
		w.rd.Close()
	}
}
