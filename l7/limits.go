package l7

import (
	"container/list"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// ConnLimits bounds the client connections of every shim that shares it:
// at most Max in all and PerClient from one client address. A connection
// beyond either bound first makes room by closing the connection that has
// been idle longest (waiting for a request head: a keep-alive connection
// between requests, or one that has not sent its first head) — of the
// same client for its bound, of anyone for the total; with none idle, it
// is refused with 503 and Retry-After. Requests in flight are never shed.
// The bound keeps the warden's descriptors (each client connection may
// need a replica connection too) for the clients that use them, and for
// the admin API.
type ConnLimits struct {
	max, perClient int

	mu            sync.Mutex
	byAddr        map[netip.Addr]int
	open          int
	idle          *list.List       // *limitEntry, longest idle first
	refused, shed [2]atomic.Uint64 // by bound: limitTotal, limitClient
}

// The bounds, as labels.
const (
	limitTotal  = 0
	limitClient = 1
)

var limitNames = [2]string{"total", "client"}

// limitEntry is a connection's place in the accounting.
type limitEntry struct {
	addr     netip.Addr
	c        *datapath.Conn
	idle     *list.Element // nil while busy
	released bool
}

// NewConnLimits bounds connections at max in all and perClient per client
// address (0: no bound).
func NewConnLimits(max, perClient int) *ConnLimits {
	return &ConnLimits{max: max, perClient: perClient, byAddr: map[netip.Addr]int{}, idle: list.New()}
}

// Max and PerClient are the bounds (0: none).
func (l *ConnLimits) Max() int       { return l.max }
func (l *ConnLimits) PerClient() int { return l.perClient }

// admit accounts a new connection c from addr, closing an idle one to make
// room at a bound; nil means refused (bound says which).
func (l *ConnLimits) admit(c *datapath.Conn, addr netip.Addr) (e *limitEntry, bound int) {
	if l == nil {
		return &limitEntry{c: c}, 0
	}
	var shed []*datapath.Conn
	l.mu.Lock()
	for _, b := range []int{limitClient, limitTotal} {
		full := func() bool {
			if b == limitClient {
				return l.perClient > 0 && l.byAddr[addr] >= l.perClient
			}
			return l.max > 0 && l.open >= l.max
		}
		for full() {
			victim := l.oldestIdle(b == limitClient, addr)
			if victim == nil {
				l.mu.Unlock()
				l.refused[b].Add(1)
				return nil, b
			}
			l.releaseLocked(victim)
			l.shed[b].Add(1)
			shed = append(shed, victim.c)
		}
	}
	e = &limitEntry{addr: addr, c: c}
	l.open++
	l.byAddr[addr]++
	l.mu.Unlock()
	for _, v := range shed {
		v.Close() // its goroutine, waiting for a head, ends
	}
	return e, 0
}

// oldestIdle is the connection idle longest (of addr only, with sameAddr).
func (l *ConnLimits) oldestIdle(sameAddr bool, addr netip.Addr) *limitEntry {
	for el := l.idle.Front(); el != nil; el = el.Next() {
		e := el.Value.(*limitEntry)
		if !sameAddr || e.addr == addr {
			return e
		}
	}
	return nil
}

// setIdle records whether e's connection waits for a request head.
func (l *ConnLimits) setIdle(e *limitEntry, idle bool) {
	if l == nil || e == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case e.released:
	case idle && e.idle == nil:
		e.idle = l.idle.PushBack(e)
	case !idle && e.idle != nil:
		l.idle.Remove(e.idle)
		e.idle = nil
	}
}

// release ends e's accounting (its connection closed).
func (l *ConnLimits) release(e *limitEntry) {
	if l == nil || e == nil {
		return
	}
	l.mu.Lock()
	l.releaseLocked(e)
	l.mu.Unlock()
}

func (l *ConnLimits) releaseLocked(e *limitEntry) {
	if e.released {
		return
	}
	e.released = true
	if e.idle != nil {
		l.idle.Remove(e.idle)
		e.idle = nil
	}
	l.open--
	if l.byAddr[e.addr]--; l.byAddr[e.addr] <= 0 {
		delete(l.byAddr, e.addr)
	}
}

// LimitStats are the limiter's gauges and counters.
type LimitStats struct {
	Open, Idle     int
	Refused, Shed  map[string]uint64 // by bound: total, client
	Max, PerClient int
}

// Stats reads them.
func (l *ConnLimits) Stats() LimitStats {
	l.mu.Lock()
	st := LimitStats{Open: l.open, Idle: l.idle.Len(), Max: l.max, PerClient: l.perClient,
		Refused: map[string]uint64{}, Shed: map[string]uint64{}}
	l.mu.Unlock()
	for b, name := range limitNames {
		st.Refused[name] = l.refused[b].Load()
		st.Shed[name] = l.shed[b].Load()
	}
	return st
}
