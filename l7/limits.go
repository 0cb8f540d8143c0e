package l7

import (
	"container/list"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// ConnLimits bounds the client connections of every shim that shares it:
// at most Max in all and PerClient from one client address.
//
// A connection is in one of three states: idle (waiting for a request
// head: a keep-alive connection between requests, or one that has not
// sent its first head), waiting for its request's body (the head is read;
// the shim holds nothing for it but its socket until the body is there:
// bodywait.go), or busy (in an exchange, with a replica connection).
// A connection beyond a bound makes room, or is refused with 503 and
// Retry-After:
//   - at its client's bound, by closing that client's connection idle
//     longest (one whose next head is arriving is not idle); a client's requests waiting for their bodies are never
//     closed to make room for the same client (a client that floods
//     with bodies it does not send is refused, not let through);
//   - at the total bound, by closing the connection idle longest of
//     anyone, else by ending the request that has waited longest for
//     its body among the clients that hold more connections than the
//     newcomer's, or as many but that has waited past bodyWaitGrace
//     (answered 503): a bystander gets in past a flood from a few
//     addresses (whose own newcomers are refused) or from many.
//
// Requests in flight (busy) are never shed. The bound keeps the warden's
// descriptors (a busy connection holds up to four: its socket, a replica
// connection and a splice pipe; serve sizes Max by that) for the clients
// that use them, and for the admin API.
type ConnLimits struct {
	max, perClient int

	mu            sync.Mutex
	byAddr        map[netip.Addr]*addrConns
	open          int
	idle          *list.List       // *limitEntry, longest idle first
	body          *list.List       // *limitEntry, longest waiting for a body first
	refused, shed [2]atomic.Uint64 // by bound: limitTotal, limitClient
	clock         func() time.Time // nil: time.Now (tests set it)
}

func (l *ConnLimits) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// The bounds, as labels.
const (
	limitTotal  = 0
	limitClient = 1
)

var limitNames = [2]string{"total", "client"}

// connPhase is where a connection stands, for the bounds.
type connPhase int8

const (
	phaseBusy connPhase = iota // in an exchange
	phaseIdle                  // waiting for a request head
	phaseBody                  // waiting for its request's body
)

// addrConns is one client address's share: its connections, and its idle
// ones, longest idle first.
type addrConns struct {
	n    int
	idle list.List // *limitEntry
}

// limitEntry is a connection's place in the accounting.
type limitEntry struct {
	addr     netip.Addr
	c        *datapath.Conn
	phase    connPhase
	el       *list.Element // in l.idle or l.body (nil while busy)
	addrEl   *list.Element // in its address's idle list
	since    time.Time     // phaseBody: when it began to wait
	released bool
}

// victimScan bounds how many connections a bound looks at for one it may
// close (the longest idle, or waiting, first): a newcomer that finds none
// among them is refused.
const victimScan = 256

// NewConnLimits bounds connections at max in all and perClient per client
// address (0: no bound).
func NewConnLimits(max, perClient int) *ConnLimits {
	return &ConnLimits{max: max, perClient: perClient, byAddr: map[netip.Addr]*addrConns{}, idle: list.New(), body: list.New()}
}

// Max and PerClient are the bounds (0: none).
func (l *ConnLimits) Max() int       { return l.max }
func (l *ConnLimits) PerClient() int { return l.perClient }

// admit accounts a new connection c from addr, making room at a bound;
// nil means refused (bound says which).
func (l *ConnLimits) admit(c *datapath.Conn, addr netip.Addr) (e *limitEntry, bound int) {
	if l == nil {
		return &limitEntry{c: c}, 0
	}
	var closeIdle, endBody []*datapath.Conn
	l.mu.Lock()
	for _, b := range []int{limitClient, limitTotal} {
		for l.full(b, addr) {
			victim := l.victim(b, addr)
			if victim == nil {
				l.mu.Unlock()
				l.refused[b].Add(1)
				return nil, b
			}
			if victim.phase == phaseBody {
				endBody = append(endBody, victim.c)
			} else {
				closeIdle = append(closeIdle, victim.c)
			}
			l.releaseLocked(victim)
			l.shed[b].Add(1)
		}
	}
	e = &limitEntry{addr: addr, c: c}
	l.open++
	a := l.byAddr[addr]
	if a == nil {
		a = &addrConns{}
		l.byAddr[addr] = a
	}
	a.n++
	l.mu.Unlock()
	for _, v := range closeIdle {
		v.Close() // its goroutine, waiting for a head, ends
	}
	for _, v := range endBody {
		_ = v.SetReadDeadline(time.Unix(1, 0)) // its body wait ends; it answers 503
	}
	return e, 0
}

// full reports bound b reached for a new connection from addr.
func (l *ConnLimits) full(b int, addr netip.Addr) bool {
	if b == limitClient {
		return l.perClient > 0 && l.count(addr) >= l.perClient
	}
	return l.max > 0 && l.open >= l.max
}

func (l *ConnLimits) count(addr netip.Addr) int {
	if a := l.byAddr[addr]; a != nil {
		return a.n
	}
	return 0
}

// victim is the connection that makes room at bound b for one from addr,
// or nil (see ConnLimits).
func (l *ConnLimits) victim(b int, addr netip.Addr) *limitEntry {
	if b == limitClient {
		if a := l.byAddr[addr]; a != nil {
			return quietest(&a.idle)
		}
		return nil
	}
	if e := quietest(l.idle); e != nil {
		return e
	}
	mine, now := l.count(addr)+1, l.now()
	el := l.body.Front()
	for i := 0; el != nil && i < victimScan; i, el = i+1, el.Next() {
		e := el.Value.(*limitEntry)
		if theirs := l.count(e.addr); theirs > mine || (theirs >= mine && now.Sub(e.since) > bodyWaitGrace) {
			return e
		}
	}
	return nil
}

// bodyWaitGrace: a request that has waited this long for its body may be
// ended for a newcomer from a client no heavier than its own (a client
// sends its body right after its head; one from each of many addresses
// that never does must not shut everyone else out either).
const bodyWaitGrace = time.Second

// quietest is the connection idle longest in idle whose client is not
// sending it a request head right now: a head that has arrived and is not
// read yet (a new connection's first request, in the moment before its
// goroutine reads it) would be lost unanswered; closing the newcomer's
// instead says 503. At most victimScan are looked at.
func quietest(idle *list.List) *limitEntry {
	el := idle.Front()
	for i := 0; el != nil && i < victimScan; i, el = i+1, el.Next() {
		if e := el.Value.(*limitEntry); !hasInput(e.c) {
			return e
		}
	}
	return nil
}

// hasInput reports, without reading or waiting, bytes waiting on c.
func hasInput(c *datapath.Conn) bool {
	if c == nil || c.TCPConn == nil {
		return false
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	var b [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	return n > 0
}

// setPhase records where e's connection stands. It reports false when the
// connection was shed meanwhile (closed while idle, or its body wait ended
// to make room): a head read just before the close is not served.
func (l *ConnLimits) setPhase(e *limitEntry, p connPhase) (kept bool) {
	if l == nil || e == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.released {
		return false
	}
	if e.phase == p {
		return true
	}
	l.unlistLocked(e)
	e.phase = p
	switch p {
	case phaseIdle:
		e.el = l.idle.PushBack(e)
		e.addrEl = l.byAddr[e.addr].idle.PushBack(e)
	case phaseBody:
		e.el = l.body.PushBack(e)
		e.since = l.now()
	}
	return true
}

// unlistLocked takes e out of the idle or body lists. Call with mu.
func (l *ConnLimits) unlistLocked(e *limitEntry) {
	switch e.phase {
	case phaseIdle:
		l.idle.Remove(e.el)
		l.byAddr[e.addr].idle.Remove(e.addrEl)
	case phaseBody:
		l.body.Remove(e.el)
	}
	e.el, e.addrEl = nil, nil
	e.phase = phaseBusy
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
	l.unlistLocked(e)
	e.released = true
	l.open--
	if a := l.byAddr[e.addr]; a != nil {
		if a.n--; a.n <= 0 {
			delete(l.byAddr, e.addr)
		}
	}
}

// LimitStats are the limiter's gauges and counters.
type LimitStats struct {
	Open, Idle, AwaitingBody int
	Refused, Shed            map[string]uint64 // by bound: total, client
	Max, PerClient           int
}

// Stats reads them.
func (l *ConnLimits) Stats() LimitStats {
	l.mu.Lock()
	st := LimitStats{Open: l.open, Idle: l.idle.Len(), AwaitingBody: l.body.Len(), Max: l.max, PerClient: l.perClient,
		Refused: map[string]uint64{}, Shed: map[string]uint64{}}
	l.mu.Unlock()
	for b, name := range limitNames {
		st.Refused[name] = l.refused[b].Load()
		st.Shed[name] = l.shed[b].Load()
	}
	return st
}
