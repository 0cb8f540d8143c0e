package maps

import (
	"errors"
	"os"
	"sync"

	"github.com/cilium/ebpf/ringbuf"
)

// endWaiters fans the response_ends ring buffer out to the pairs waiting
// for their upstream's response to end. One reader per State.
type endWaiters struct {
	once sync.Once
	err  error
	mu   sync.Mutex
	rd   *ringbuf.Reader
	byUp map[uint64]chan ResponseEnd
}

// watchEnds registers ch for the ends of upstream cookie's responses.
func (s *State) watchEnds(cookie uint64, ch chan ResponseEnd) error {
	w := &s.ends
	w.once.Do(func() {
		w.byUp = map[uint64]chan ResponseEnd{}
		w.rd, w.err = ringbuf.NewReader(s.objs.LmwResponseEnds)
		if w.err == nil {
			go w.run()
		}
	})
	if w.err != nil {
		return w.err
	}
	w.mu.Lock()
	w.byUp[cookie] = ch
	w.mu.Unlock()
	return nil
}

func (s *State) unwatchEnds(cookie uint64) {
	w := &s.ends
	w.mu.Lock()
	delete(w.byUp, cookie)
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
		ev, ok := DecodeResponseEnd(rec)
		if !ok {
			continue
		}
		w.mu.Lock()
		ch := w.byUp[ev.Cookie]
		w.mu.Unlock()
		if ch != nil {
			select {
			case ch <- ev:
			default: // the pair is not listening (closing): drop
			}
		}
	}
}

func (w *endWaiters) close() {
	if w.rd != nil {
		w.rd.Close()
	}
}
