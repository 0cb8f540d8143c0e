package agent

import (
	"fmt"
	"time"
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

// SessionInfo is one live session as the admin API shows it: the keyed hash
// only, never the raw id.
type SessionInfo struct {
	Model    string    `json:"model"`
	Hash     string    `json:"hash"` // 16 hex digits
	Replica  int       `json:"replica"`
	LastSeen time.Time `json:"last_seen"`
	Turns    uint32    `json:"turns"`
	// Active: a request within the last ActiveWindow (counts toward load).
	Active bool `json:"active"`
}

// sessionEntry is one conversation: 24 bytes, plus its slot in the index.
type sessionEntry struct {
	hash     uint64
	lastSeen int64 // unix nanoseconds of the last request (placement or end)
	replica  int16 // pinned replica
	active   bool  // counted in active[replica]
	turns    uint32
}

// ActiveWindow: a session with a request (start or end) within this time is
// active, and only active sessions add to their replica's load. A pinned
// session stays pinned for the whole TTL, but one that has been quiet for
// a minute has most likely ended; counting it would make placement avoid
// replicas for conversations that will never come back.
const ActiveWindow = time.Minute

// MaxReplicas bounds the replicas of one model (the table stores an int16).
const MaxReplicas = 1 << 15

// sessionTable holds the live sessions of one model. Entries sit densely in
// a slice and the index maps a hash to its position, so that expiry can sweep
// the slice incrementally: every placement looks at sweepPerPlace entries
// from a rotating cursor (amortised O(1), never a full scan on the request
// path), and a lookup that finds an idle entry expires it on the spot, so
// the TTL is exact for routing even when the sweep lags behind.
type sessionTable struct {
	index   map[uint64]uint32
	entries []sessionEntry
	cursor  int
	ttl     int64
	sink    SessionSink
	pinned  []int // live sessions per replica
	active  []int // active sessions per replica (ActiveWindow)
	expired uint64
}

// sweepPerPlace entries are examined for expiry on every placement. Two is
// enough to keep up with any steady state: each new session adds one entry,
// and the sweep visits two.
const sweepPerPlace = 2

func newSessionTable(replicas int, ttl time.Duration, sink SessionSink) *sessionTable {
	return &sessionTable{
		index:  make(map[uint64]uint32),
		ttl:    int64(ttl),
		sink:   sink,
		pinned: make([]int, replicas),
		active: make([]int, replicas),
	}
}

func (t *sessionTable) len() int { return len(t.entries) }

// lookup returns the position of a live session, or -1. An entry idle for
// longer than the TTL is expired here and reported absent.
func (t *sessionTable) lookup(h uint64, now int64) int {
	i, ok := t.index[h]
	if !ok {
		return -1
	}
	if now-t.entries[i].lastSeen > t.ttl {
		t.remove(int(i))
		t.expired++
		return -1
	}
	return int(i)
}

// insert adds a session pinned to replica; h must not be present.
func (t *sessionTable) insert(h uint64, replica int, now int64) int {
	i := len(t.entries)
	t.entries = append(t.entries, sessionEntry{hash: h, lastSeen: now, replica: int16(replica), active: true})
	t.index[h] = uint32(i)
	t.pinned[replica]++
	t.active[replica]++
	if t.sink != nil {
		t.sink.Upsert(h, replica)
	}
	return i
}

// repin moves the session at position i to another replica.
func (t *sessionTable) repin(i, replica int) {
	e := &t.entries[i]
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

// touch records activity of the session at position i.
func (t *sessionTable) touch(i int, now int64) {
	e := &t.entries[i]
	if now > e.lastSeen {
		e.lastSeen = now
	}
	if !e.active {
		e.active = true
		t.active[e.replica]++
	}
}

// touchHash is touch by hash (a request's end).
func (t *sessionTable) touchHash(h uint64, now int64) {
	if i, ok := t.index[h]; ok {
		t.touch(int(i), now)
	}
}

// remove drops the entry at position i by moving the last entry into its place.
func (t *sessionTable) remove(i int) {
	e := t.entries[i]
	last := len(t.entries) - 1
	if i != last {
		t.entries[i] = t.entries[last]
		t.index[t.entries[i].hash] = uint32(i)
	}
	t.entries = t.entries[:last]
	delete(t.index, e.hash)
	t.pinned[e.replica]--
	if e.active {
		t.active[e.replica]--
	}
	if t.sink != nil {
		t.sink.Delete(e.hash)
	}
}

// sweep examines up to budget entries from the cursor, expires the idle
// ones and marks the quiet ones inactive; it returns how many it expired.
func (t *sessionTable) sweep(now int64, budget int) int {
	n := 0
	for ; budget > 0 && len(t.entries) > 0; budget-- {
		if t.cursor >= len(t.entries) {
			t.cursor = 0
		}
		if now-t.entries[t.cursor].lastSeen > t.ttl {
			t.remove(t.cursor) // the last entry moved here: look at it next
			t.expired++
			n++
			continue
		}
		if e := &t.entries[t.cursor]; e.active && now-e.lastSeen > int64(ActiveWindow) {
			e.active = false
			t.active[e.replica]--
		}
		t.cursor++
	}
	return n
}

// snapshot copies the live sessions (for the admin API).
func (t *sessionTable) snapshot(model string, now int64, limit int) []SessionInfo {
	out := make([]SessionInfo, 0, min(len(t.entries), max(limit, 0)))
	for _, e := range t.entries {
		if limit > 0 && len(out) >= limit {
			break
		}
		if now-e.lastSeen > t.ttl {
			continue
		}
		out = append(out, SessionInfo{
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
