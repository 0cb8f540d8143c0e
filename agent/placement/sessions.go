package placement

import (
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// SessionSink mirrors the session table elsewhere, e.g. into the pinned BPF
// map `sessions` of the kernel data path. Upsert is called when a
// conversation is pinned or moves to another replica (with the key of the
// conversation it belongs under, 0 for none, and its ConversationKind),
// Delete when it expires or is dropped. Both run under the model's lock on
// the placement path: they must be quick and must not call back into the
// Model. A nil sink is fine.
type SessionSink interface {
	Upsert(hash uint64, replica int, parent uint64, kind uint8)
	Delete(hash uint64)
}

// sessionEntry is one conversation: 56 bytes, inline in its slot of the
// index, placed in the eviction heap (evict.go).
type sessionEntry struct {
	hash     uint64
	parent   uint64 // the conversation it belongs under (a subagent's parent), 0: none
	lastSeen int64  // unix nanoseconds of the last request (placement or end)
	prio     int64  // eviction priority: the table's clock when last placed or served, plus weight
	heapPos  int32  // its index in the eviction heap
	turns    uint32 // requests placed
	weight   uint32 // tokens of its latest turn: the context its replica caches for it
	// lastBytes is the body size of the conversation's latest request
	// that carried its context (not a side request: conversation.go).
	lastBytes uint32
	replica   int16 // pinned replica
	// side is 1 + the replica a smaller prompt of the conversation went
	// to (0: none), until its next request says whether that prompt
	// started the context over.
	side   uint16
	active bool // counted in active[replica]
	kind   ConversationKind
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
// Only inference requests that were placed enter it (Request.NonInference).
// It holds at most max sessions (0: no bound); a new session beyond it
// evicts the one worth least, weighed by the tokens its latest turn sent
// and by how long ago (evict.go): a client that makes up session ids, or
// repeats them, with small requests cannot push real conversations off
// their replicas.
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
	kinds   [NumConversationKinds]int
	active  []int // active sessions per replica (ActiveWindow)
	expired uint64
	evicted uint64
	// heap orders the entries for eviction (slot indices, least worth
	// first); clock is the priority of the last entry evicted (evict.go).
	heap  []int32
	clock int64
	// grows counts the times the index doubled (a paged read that sees
	// it change starts over: sessions_page.go).
	grows int
	// onRemove, if set, learns of every session that leaves the table.
	onRemove func(hash uint64)
}

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

// moved points the heap at the entry just copied from slot from to slot to.
func (t *sessionTable) moved(from, to int) {
	t.heap[t.slots[to].heapPos] = int32(to)
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

// insert adds conversation c pinned to replica; c.key (non-zero) must
// not be present. At the bound, the session worth least makes room
// (evict.go). Its weight is unknown until a turn is placed (turn) or
// served (credit). It returns the entry's slot (slots move when the table
// grows or an entry goes).
func (t *sessionTable) insert(c conversation, replica int, now int64) int {
	if t.max > 0 && t.count >= t.max {
		t.evict()
	}
	if 4*(t.count+1) > 3*len(t.slots) {
		t.grow()
	}
	i := t.place(sessionEntry{hash: c.key, parent: c.parent, kind: c.kind, lastSeen: now, prio: t.clock, replica: int16(replica), active: true})
	t.heapPush(i)
	t.count++
	t.kinds[c.kind]++
	t.pinned[replica]++
	t.active[replica]++
	t.mirror(i)
	return i
}

// mirror writes the entry in slot i to the sink.
func (t *sessionTable) mirror(i int) {
	if e := &t.slots[i]; t.sink != nil {
		t.sink.Upsert(e.hash, int(e.replica), e.parent, uint8(e.kind))
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

// grow doubles the index, keeping the eviction heap's order.
func (t *sessionTable) grow() {
	old := t.slots
	t.slots = make([]sessionEntry, 2*len(old))
	t.grows++
	for k, j := range t.heap {
		i := t.place(old[j])
		t.heap[k] = int32(i)
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
	t.mirror(i)
}

// touch records activity of the session in slot i: it is worth its
// weight again from the table's clock now (evict.go).
func (t *sessionTable) touch(i int, now int64) {
	e := &t.slots[i]
	if now > e.lastSeen {
		e.lastSeen = now
	}
	if !e.active {
		e.active = true
		t.active[e.replica]++
	}
	e.prio = t.clock + int64(e.weight)
	t.heapFix(int(e.heapPos))
}

// turn records a request placed for the session in slot i: activity and
// one more turn; tokens (>= 0) is its prompt, known now (its body is in
// hand), which weighs the session until the turn is served (credit).
func (t *sessionTable) turn(i int, now int64, tokens int64) {
	e := &t.slots[i]
	e.turns++
	if tokens >= 0 {
		e.weight = uint32(min(tokens, math.MaxUint32))
	}
	t.touch(i, now)
}

// credit weighs the session h by a turn that ended: tokens is the prompt
// the replica took and answered with success, or 0 (answered otherwise:
// nothing the replica keeps is worth its place).
func (t *sessionTable) credit(h uint64, tokens int64, now int64) {
	if i := t.find(h); i >= 0 {
		t.slots[i].weight = uint32(min(max(tokens, 0), math.MaxUint32))
		t.touch(i, now)
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
	t.heapRemove(int(t.slots[i].heapPos))
	e := t.slots[i]
	t.count--
	t.kinds[e.kind]--
	t.pinned[e.replica]--
	if e.active {
		t.active[e.replica]--
	}
	if t.sink != nil {
		t.sink.Delete(e.hash)
	}
	if t.onRemove != nil {
		t.onRemove(e.hash)
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
		info := sessionInfo(model, &e)
		out = append(out, info)
	}
	return out
}

// sessionInfo is the admin API's view of entry e.
func sessionInfo(model string, e *sessionEntry) adminapi.SessionInfo {
	info := adminapi.SessionInfo{
		Model:    model,
		Hash:     fmt.Sprintf("%016x", e.hash),
		Kind:     e.kind.String(),
		Replica:  int(e.replica),
		LastSeen: time.Unix(0, e.lastSeen).UTC(),
		Turns:    e.turns,
		Active:   e.active,
	}
	if e.parent != 0 {
		info.Parent = fmt.Sprintf("%016x", e.parent)
	}
	return info
}
