package placement

import (
	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy sticky under cache-capacity admission (admission.go). Admission
// parks a conversation that is not live when no replica has room for it;
// sticky must then start or resume it where that room is, or the room
// admission counted is not the room it gets. So, while admission is
// engaged (mode auto: the live context exceeds the caches), a request of a
// conversation that is not live goes
//   - to the replica admission granted it room on, if it waited;
//   - new: to the least-loaded replica with room for it (with none, which
//     happens only after it waited out its timeout: the least overfull);
//   - known: to its pinned replica if that has room, else to the replica
//     with room where cost predicts the lowest time to first token (what
//     LRU still holds of it counts), and is repinned there; with room
//     nowhere it stays where its cache is.
// A live conversation (a turn in flight, or idle for less time than it
// takes to have most likely ended) is placed by sticky's rule alone: it
// is never parked, and moving it would re-prefill its whole context.

// stickyRoom returns where request r of conversation h (pos: its position
// in the session table, -1: new) goes under admission, or -1 to leave it
// to sticky's rule; call with m.mu held.
func (m *Model) stickyRoom(h uint64, pos int, r Request) int {
	if r.roomOn > 0 && m.reps[r.roomOn-1].healthy {
		return r.roomOn - 1 // the room reserved for it while it waited
	}
	if h == 0 || !m.peer.admission.engaged || !m.admissionPlaces(r) || m.oversize(r) {
		return -1
	}
	s := m.peer.sessions[h]
	if s != nil && (s.live > 0 || s.inflight > 0) {
		return -1
	}
	prompt := m.promptTokens(r)
	now := r.Now.UnixNano()
	if pos < 0 {
		i := least.By(&m.start, len(m.reps), func(i int) (float64, bool) {
			return m.load(i), m.reps[i].healthy && m.admits(nil, i, prompt)
		})
		if i < 0 {
			i = m.pickLeastOverfull(nil, prompt, now)
		}
		return i
	}
	if p := int(m.sessions.slots[pos].replica); m.reps[p].healthy && m.admits(s, p, prompt) {
		return -1
	}
	return m.pickCost(s, prompt, now)
}
