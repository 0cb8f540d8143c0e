package bench

import "slices"

// Conversations rebuilt from a trace's hash chains. An agent or chat client
// resends its whole history each turn, so a conversation's next turn
// starts with every block of the turn before it; only that turn's last
// block, if it was partial, comes back under a new id, since the reply and
// the next message fill it and its hash changes. The rule (docs/workload.md):
//
//   - row R continues an earlier row E when R's ids start with all of E's
//     ids, or with all of them but E's last when that block was partial;
//   - that common start must reach past the first block (every row of
//     Mooncake's traces shares block 0, a system prompt: sharing only it
//     says nothing about the conversation);
//   - E arrived strictly before R (a turn follows an answered one) and has
//     no next turn yet (a conversation is a chain: a row that could
//     continue a row already continued starts a conversation of its own);
//   - among several such rows, the longest common start wins, then the
//     most recent row.
//
// Every other row starts a conversation.

// traceConversations is the rebuilt structure of a trace's rows.
type traceConversations struct {
	of     []int   // row → its conversation (numbered by first arrival)
	turn   []int   // row → its turn in the conversation (0: the first)
	parent []int   // row → the row it continues (-1: a first turn)
	rows   [][]int // conversation → its rows in order
}

// rebuildConversations applies the rule to t's rows (in arrival order).
func rebuildConversations(t *Trace) *traceConversations {
	n := len(t.Rows)
	c := &traceConversations{of: make([]int, n), turn: make([]int, n), parent: make([]int, n)}
	continued := make([]bool, n)
	// rows registered under a key: a chained hash of their ids, or of all
	// but the last when it is partial
	byKey := map[uint64][]int32{}
	var prefix []uint64
	for i, row := range t.Rows {
		prefix = chainHashes(prefix[:0], row.HashIDs)
		c.parent[i] = -1
		for k := len(row.HashIDs); k >= 2 && c.parent[i] < 0; k-- {
			list := byKey[prefix[k-1]]
			kept := list[:0]
			for _, e := range list { // drop rows already continued
				if !continued[e] {
					kept = append(kept, e)
				}
			}
			byKey[prefix[k-1]] = kept
			for j := len(kept) - 1; j >= 0; j-- {
				e := int(kept[j])
				if t.Rows[e].At < row.At && keyOf(t.Rows[e], t.Block, k) && slices.Equal(t.Rows[e].HashIDs[:k], row.HashIDs[:k]) {
					c.parent[i], continued[e] = e, true
					break
				}
			}
		}
		if p := c.parent[i]; p >= 0 {
			c.of[i], c.turn[i] = c.of[p], c.turn[p]+1
			c.rows[c.of[i]] = append(c.rows[c.of[i]], i)
		} else {
			c.of[i] = len(c.rows)
			c.rows = append(c.rows, []int{i})
		}
		ids := len(row.HashIDs)
		if ids >= 2 {
			byKey[prefix[ids-1]] = append(byKey[prefix[ids-1]], int32(i))
		}
		if ids-1 >= 2 && row.Input%t.Block != 0 {
			byKey[prefix[ids-2]] = append(byKey[prefix[ids-2]], int32(i))
		}
	}
	return c
}

// keyOf says whether the first k ids are one of row's keys: all its ids,
// or all but a partial last block.
func keyOf(row TraceRow, block, k int) bool {
	return k == len(row.HashIDs) || (k == len(row.HashIDs)-1 && row.Input%block != 0)
}

// chainHashes appends, for every prefix of ids, a hash of that prefix
// (splitmix64 over the chain), so a prefix is one map key.
func chainHashes(out []uint64, ids []int64) []uint64 {
	var h uint64 = 0x243f6a8885a308d3
	for _, id := range ids {
		h = splitmix(h ^ uint64(id))
		out = append(out, h)
	}
	return out
}

// splitmix is splitmix64's finalizer over x plus its constant.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
