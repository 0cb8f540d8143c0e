package placement

import (
	"fmt"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// SessionSink mirrors the session table elsewhere, e.g. into the pinned BPF
// map `sessions` of the kernel data path. Upsert is called when a session is
// pinned or moves to another replica, Delete when it expires or is dropped.
// Both run under the model's lock on the placement path: they must be quick
// and must not call back into the Model. A nil sink is fine.
type SessionSink interface {
	Upsert(hash uint64, replica int)
	Delete(hash uint64)
}

// sessionEntry is one conversation: 32 bytes, inline in its slot of the
// index, linked into its segment of the recency order (lru).
type sessionEntry struct {
	hash       uint64
	lastSeen   int64 // unix nanoseconds of the last request (placement or end)
	prev, next int32 // neighbours in its segment's recency list (-1: none)
	turns      uint32
	replica    int16 // pinned replica
	active     bool  // counted in active[replica]
	protected  bool  // in the protected segment (a second turn came)
}

// ActiveWindow: a session with a request (start or end) within this time is
// active, and only active sessions add to their replica's load and count
// as live (lmwarden_sessions_live). A pinned session stays pinned for the
// whole TTL, but one that has been quiet for a minute has most likely
// ended; counting it would make placement avoid replicas for
// conversations that will never come back.
const ActiveWindow = time.Minute

// MaxReplicas bounds the replicas of one model (the table stores an int16).
const MaxReplicas = 1 << 15

// sessionTable holds the live sessions of one model in an open-addressing
// hash table with the entries inline (linear probing on the low bits of the
// keyed hash, which is already uniform; hash 0 marks an empty slot). A
// decision touches one slot, so at 100k sessions it costs one cache miss
// rather than a map lookup followed by a second one into an entry array.
// Deletion shifts the rest of the probe run back (no tombstones), and the
// table doubles at 3/4 full.
//
// The table holds at most max sessions (0: no bound). A new session beyond
// it evicts the least recently used one, in segments (a segmented LRU): a
// session that has come back for a second turn is protected, and the
// sessions seen once (what a flood of fresh ids is made of) are evicted
// first, so a client that makes up session ids cannot push real
// conversations off their replicas; the protected segment holds at most
// protectedShare of the bound, its oldest going back to the other.
//
// Expiry never scans on the request path: every placement examines
// sweepPerPlace slots from a rotating cursor (amortised O(1)), the Warden
// sweeps a bounded number per poll tick, and a lookup that finds an idle
// entry expires it on the spot, so the TTL is exact for routing even when
// the sweep lags behind.
type sessionTable struct {
	slots   []sessionEntry // len is a power of two
	count   int
	cursor  int
	ttl     int64
	max     int // 0: unbounded
	sink    SessionSink
	pinned  []int // live sessions per replica
	active  []int // active sessions per replica (ActiveWindow)
	expired uint64
	evicted uint64
	// lru is the recency order of each segment (probation, protected):
	// head is the least recently used.
	lru [2]lruList
}

type lruList struct {
	head, tail int32
	n          int
}

// The segments of the recency order.
const (
	probation = 0 // seen once
	protected = 1 // came back
)

// protectedShare of the bound may be protected sessions.
const protectedShare = 0.8

// sweepPerPlace slots are examined for expiry on every placement: at 3/8 to
// 3/4 occupancy that is at least one entry per placement, as many as a new
// session adds.
const sweepPerPlace = 3

const minSessionSlots = 64

func newSessionTable(replicas int, ttl time.Duration, sink SessionSink) *sessionTable {
	return &sessionTable{
		slots:  make([]sessionEntry, minSessionSlots),
		ttl:    int64(ttl),
		sink:   sink,
		pinned: make([]int, replicas),
		active: make([]int, replicas),
		lru:    [2]lruList{{head: -1, tail: -1}, {head: -1, tail: -1}},
	}
}

func (t *sessionTable) len() int { return t.count }

// live is the number of active sessions.
func (t *sessionTable) live() int {
	n := 0
	for _, a := range t.active {
		n += a
	}
	return n
}

func segment(e *sessionEntry) int {
	if e.protected {
		return protected
	}
	return probation
}

// linkTail appends slot i to the most recent end of its segment.
func (t *sessionTable) linkTail(i int) {
	e := &t.slots[i]
	l := &t.lru[segment(e)]
	e.prev, e.next = l.tail, -1
	if l.tail >= 0 {
		t.slots[l.tail].next = int32(i)
	} else {
		l.head = int32(i)
	}
	l.tail = int32(i)
	l.n++
}

// unlink takes slot i out of its segment's list.
func (t *sessionTable) unlink(i int) {
	e := &t.slots[i]
	l := &t.lru[segment(e)]
	if e.prev >= 0 {
		t.slots[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		t.slots[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
	l.n--
}

// moved points the neighbours of the entry just copied from slot from to
// slot to at its new place.
func (t *sessionTable) moved(from, to int) {
	e := &t.slots[to]
	l := &t.lru[segment(e)]
	if e.prev >= 0 {
		t.slots[e.prev].next = int32(to)
	} else if l.head == int32(from) {
		l.head = int32(to)
	}
	if e.next >= 0 {
		t.slots[e.next].prev = int32(to)
	} else if l.tail == int32(from) {
		l.tail = int32(to)
	}
}

// find returns the slot of hash h, or -1, without looking at its age.
func (t *sessionTable) find(h uint64) int {
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch t.slots[i].hash {
		case h:
			return i
		case 0:
			return -1
		}
	}
}

// lookup returns the slot of a live session, or -1. An entry idle for
// longer than the TTL is expired here and reported absent.
func (t *sessionTable) lookup(h uint64, now int64) int {
	i := t.find(h)
	if i < 0 {
		return -1
	}
	if now-t.slots[i].lastSeen > t.ttl {
		t.remove(i)
		t.expired++
		return -1
	}
	return i
}

// insert adds a session pinned to replica; h (non-zero) must not be
// present. At the bound, the least recently used session of the
// probation segment (else of the protected one) makes room. It returns
// the entry's slot (slots move when the table grows or an entry goes).
func (t *sessionTable) insert(h uint64, replica int, now int64) int {
	if t.max > 0 && t.count >= t.max {
		t.evict()
	}
	if 4*(t.count+1) > 3*len(t.slots) {
		t.grow()
	}
	i := t.place(sessionEntry{hash: h, lastSeen: now, replica: int16(replica), active: true})
	t.linkTail(i)
	t.count++
	t.pinned[replica]++
	t.active[replica]++
	if t.sink != nil {
		t.sink.Upsert(h, replica)
	}
	return i
}

// evict removes the least recently used session (lmwarden_sessions_evicted_total).
func (t *sessionTable) evict() {
	seg := probation
	if t.lru[probation].n == 0 {
		seg = protected
	}
	if i := t.lru[seg].head; i >= 0 {
		t.remove(int(i))
		t.evicted++
	}
}

// place puts e into the first free slot of its probe run (not linked).
func (t *sessionTable) place(e sessionEntry) int {
	mask := len(t.slots) - 1
	i := int(e.hash) & mask
	for t.slots[i].hash != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = e
	return i
}

// grow doubles the index, keeping each segment's recency order.
func (t *sessionTable) grow() {
	old := t.slots
	lists := t.lru
	t.slots = make([]sessionEntry, 2*len(old))
	t.lru = [2]lruList{{head: -1, tail: -1}, {head: -1, tail: -1}}
	for _, l := range lists {
		for j := l.head; j >= 0; j = old[j].next {
			t.linkTail(t.place(old[j]))
		}
	}
	t.cursor = 0
}

// setLimit bounds the table at max sessions (0: none), evicting the least
// recently used ones beyond it now.
func (t *sessionTable) setLimit(max int) {
	t.max = max
	for max > 0 && t.count > max {
		t.evict()
	}
}

// repin moves the session in slot i to another replica.
func (t *sessionTable) repin(i, replica int) {
	e := &t.slots[i]
	if int(e.replica) == replica {
		return
	}
	t.pinned[e.replica]--
	t.pinned[replica]++
	if e.active {
		t.active[e.replica]--
		t.active[replica]++
	}
	e.replica = int16(replica)
	if t.sink != nil {
		t.sink.Upsert(e.hash, replica)
	}
}

// touch records activity of the session in slot i (it becomes the most
// recently used of its segment).
func (t *sessionTable) touch(i int, now int64) {
	e := &t.slots[i]
	if now > e.lastSeen {
		e.lastSeen = now
	}
	if !e.active {
		e.active = true
		t.active[e.replica]++
	}
	t.unlink(i)
	t.linkTail(i)
}

// turn records a request placed for the session in slot i: activity, one
// more turn, and from its second turn on a place in the protected segment.
func (t *sessionTable) turn(i int, now int64) {
	t.touch(i, now)
	e := &t.slots[i]
	e.turns++
	if e.protected || e.turns < 2 {
		return
	}
	t.unlink(i)
	e.protected = true
	t.linkTail(i)
	if limit := int(protectedShare * float64(t.max)); t.max > 0 && t.lru[protected].n > max(limit, 1) {
		// The oldest protected session goes back to probation, as the
		// most recent of it.
		j := int(t.lru[protected].head)
		t.unlink(j)
		t.slots[j].protected = false
		t.linkTail(j)
	}
}

// touchHash is touch by hash (a request's end).
func (t *sessionTable) touchHash(h uint64, now int64) {
	if i := t.find(h); i >= 0 {
		t.touch(i, now)
	}
}

// remove empties slot i and shifts later entries of the probe run back
// into the hole (backward-shift deletion), so no probe run is broken.
func (t *sessionTable) remove(i int) {
	t.unlink(i)
	e := t.slots[i]
	t.count--
	t.pinned[e.replica]--
	if e.active {
		t.active[e.replica]--
	}
	if t.sink != nil {
		t.sink.Delete(e.hash)
	}
	mask := len(t.slots) - 1
	hole := i
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		home := int(t.slots[j].hash) & mask
		// The entry at j may move into the hole unless its home lies
		// cyclically in (hole, j]: then it must stay at or after its home.
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			t.moved(j, hole)
			hole = j
		}
	}
	t.slots[hole] = sessionEntry{}
}

// sweep examines up to budget slots from the cursor, expires the idle
// entries and marks the quiet ones inactive; it returns how many it expired.
func (t *sessionTable) sweep(now int64, budget int) int {
	n := 0
	mask := len(t.slots) - 1
	for ; budget > 0 && t.count > 0; budget-- {
		t.cursor &= mask
		e := &t.slots[t.cursor]
		switch {
		case e.hash == 0:
		case now-e.lastSeen > t.ttl:
			t.remove(t.cursor) // a later entry may have shifted here: look again
			t.expired++
			n++
			continue
		case e.active && now-e.lastSeen > int64(ActiveWindow):
			e.active = false
			t.active[e.replica]--
		}
		t.cursor++
	}
	return n
}

// snapshot copies the live sessions (for the admin API).
func (t *sessionTable) snapshot(model string, now int64, limit int) []adminapi.SessionInfo {
	out := make([]adminapi.SessionInfo, 0, min(t.count, max(limit, 0)))
	for _, e := range t.slots {
		if e.hash == 0 {
			continue
		}
		if limit > 0 && len(out) >= limit {
			break
		}
		if now-e.lastSeen > t.ttl {
			continue
		}
		out = append(out, adminapi.SessionInfo{
			Model:    model,
			Hash:     fmt.Sprintf("%016x", e.hash),
			Replica:  int(e.replica),
			LastSeen: time.Unix(0, e.lastSeen).UTC(),
			Turns:    e.turns,
			Active:   e.active,
		})
	}
	return out
}
