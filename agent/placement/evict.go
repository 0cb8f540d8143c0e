package placement

// Which session leaves a full table (sessions.go). A session's worth is
// what its replica holds for it: the tokens of its latest turn (an agent
// resends its whole history every turn, so that is the context cached
// there), and it decays with time as other sessions come and go. The rule
// is GreedyDual's (Young; Cao and Irani's GreedyDual-Size for web caches):
// every entry has a priority, the table's clock when it was last placed or
// served plus its weight; a full table evicts the lowest priority and
// moves its clock up to it. An entry not touched since is evicted once
// the clock has risen by its weight, and the clock rises only as fast as
// the entries evicted are worth: a flood of new ids whose requests carry
// 25 tokens raises it by 25 for every table's worth of them, so a
// conversation with a 10,000-token context outlives 400 full turns of the
// table, while among conversations of one size the least recently used
// goes first. Repeating an id does not help it: a turn re-weighs the
// entry by that turn's own size, never by how many turns there were.
//
// The weight is known at placement when the request's body is in hand
// (its Content-Length, capped at the largest cache), and is set again
// when the turn ends (credit): by the body the replica took if it
// answered with success, else 0, so that a request a replica refuses
// (a body that is not a prompt) is worth nothing. Until then a session
// has weight 0: evicted first, the oldest first.

// evict removes the session worth least (lmwarden_sessions_evicted_total).
func (t *sessionTable) evict() {
	if len(t.heap) == 0 {
		return
	}
	i := int(t.heap[0])
	t.clock = max(t.clock, t.slots[i].prio)
	t.remove(i)
	t.evicted++
}

// less orders two slots for eviction: the lower priority first, then the
// one seen longer ago.
func (t *sessionTable) less(a, b int32) bool {
	ea, eb := &t.slots[a], &t.slots[b]
	if ea.prio != eb.prio {
		return ea.prio < eb.prio
	}
	return ea.lastSeen < eb.lastSeen
}

// heapPush adds slot i to the eviction heap.
func (t *sessionTable) heapPush(i int) {
	t.heap = append(t.heap, int32(i))
	k := len(t.heap) - 1
	t.slots[i].heapPos = int32(k)
	t.up(k)
}

// heapRemove takes the entry at heap index k out of the heap.
func (t *sessionTable) heapRemove(k int) {
	last := len(t.heap) - 1
	if k != last {
		t.swap(k, last)
	}
	t.heap = t.heap[:last]
	if k != last {
		t.heapFix(k)
	}
}

// heapFix restores the heap after the entry at index k changed priority.
func (t *sessionTable) heapFix(k int) {
	if !t.down(k) {
		t.up(k)
	}
}

func (t *sessionTable) swap(a, b int) {
	t.heap[a], t.heap[b] = t.heap[b], t.heap[a]
	t.slots[t.heap[a]].heapPos = int32(a)
	t.slots[t.heap[b]].heapPos = int32(b)
}

func (t *sessionTable) up(k int) {
	for k > 0 {
		parent := (k - 1) / 2
		if !t.less(t.heap[k], t.heap[parent]) {
			return
		}
		t.swap(k, parent)
		k = parent
	}
}

// down sifts index k down; it reports whether it moved.
func (t *sessionTable) down(k int) bool {
	start, n := k, len(t.heap)
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && t.less(t.heap[r], t.heap[c]) {
			c = r
		}
		if !t.less(t.heap[c], t.heap[k]) {
			break
		}
		t.swap(k, c)
		k = c
	}
	return k > start
}
