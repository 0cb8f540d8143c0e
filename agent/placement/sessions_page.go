package placement

import (
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// Reading the session table for the admin API a page at a time. A page is
// the newest limit sessions older than a cursor, so it costs a scan of the
// table, with the model's lock taken for pageChunk slots at a time (a
// placement waits for one chunk, never for the whole table), and memory
// for limit sessions, whatever the table holds.

// pageChunk slots are scanned per hold of the model's lock.
const pageChunk = 4096

// SessionKey orders a model's sessions in the admin API, newest first: by
// last seen (Unix nanoseconds), then hash.
type SessionKey struct {
	LastSeen int64
	Hash     uint64
}

// NewestKey is before every session: the first page starts there.
var NewestKey = SessionKey{LastSeen: math.MaxInt64, Hash: math.MaxUint64}

// older reports whether a comes after b, newest first.
func (a SessionKey) older(b SessionKey) bool {
	return a.LastSeen < b.LastSeen || (a.LastSeen == b.LastSeen && a.Hash < b.Hash)
}

// SessionsPage lists at most limit live sessions (hashes only) that come
// after the key after, newest first, and the key of the last one.
func (m *Model) SessionsPage(now time.Time, after SessionKey, limit int) ([]adminapi.SessionInfo, SessionKey) {
	top := &pageTop{limit: limit, seen: map[uint64]bool{}}
	t := now.UnixNano()
	grows := -1
	for from := 0; ; {
		m.mu.Lock()
		tab := m.sessions
		if g := tab.grows; g != grows {
			// The table grew (its entries moved): start over.
			from, grows = 0, g
			top.reset()
		}
		to := min(from+pageChunk, len(tab.slots))
		for i := from; i < to; i++ {
			e := &tab.slots[i]
			if e.hash != 0 && t-e.lastSeen <= tab.ttl {
				top.offer(e, after)
			}
		}
		n := len(tab.slots)
		m.mu.Unlock()
		if from = to; from >= n {
			break
		}
	}
	rows := top.sorted()
	out := make([]adminapi.SessionInfo, len(rows))
	last := after
	for i, e := range rows {
		out[i] = sessionInfo(m.cfg.Name, &e)
		last = SessionKey{e.lastSeen, e.hash}
	}
	return out, last
}

// pageTop keeps the newest limit sessions offered (a min-heap: the oldest
// on top), each once (an entry a deletion moved may be offered twice).
type pageTop struct {
	limit int
	rows  []sessionEntry
	seen  map[uint64]bool
}

func (p *pageTop) reset() {
	p.rows = p.rows[:0]
	clear(p.seen)
}

func keyOf(e *sessionEntry) SessionKey { return SessionKey{e.lastSeen, e.hash} }

// offer considers e for the page after the key after.
func (p *pageTop) offer(e *sessionEntry, after SessionKey) {
	k := keyOf(e)
	if !k.older(after) || p.seen[e.hash] {
		return
	}
	if len(p.rows) < p.limit {
		p.seen[e.hash] = true
		heap.Push(p, *e)
		return
	}
	if oldest := keyOf(&p.rows[0]); oldest.older(k) {
		delete(p.seen, p.rows[0].hash)
		p.seen[e.hash] = true
		p.rows[0] = *e
		heap.Fix(p, 0)
	}
}

// sorted is the page, newest first.
func (p *pageTop) sorted() []sessionEntry {
	out := slices.Clone(p.rows)
	slices.SortFunc(out, func(a, b sessionEntry) int {
		switch ka, kb := keyOf(&a), keyOf(&b); {
		case kb.older(ka):
			return -1
		case ka.older(kb):
			return 1
		}
		return 0
	})
	return out
}

// heap.Interface, the oldest on top.
func (p *pageTop) Len() int           { return len(p.rows) }
func (p *pageTop) Less(a, b int) bool { return keyOf(&p.rows[a]).older(keyOf(&p.rows[b])) }
func (p *pageTop) Swap(a, b int)      { p.rows[a], p.rows[b] = p.rows[b], p.rows[a] }
func (p *pageTop) Push(x any)         { p.rows = append(p.rows, x.(sessionEntry)) }
func (p *pageTop) Pop() any {
	x := p.rows[len(p.rows)-1]
	p.rows = p.rows[:len(p.rows)-1]
	return x
}
