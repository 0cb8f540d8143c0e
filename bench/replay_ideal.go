package bench

import "math"

// The ideal hit rates of a replay, in the trace's own terms: a request's
// cached share is its longest start of blocks (hash ids) that an earlier
// request of the replayed rows already had, counted in tokens (the last
// block at its real size when it is partial and matched), over all prompt
// tokens. Two caches:
//
//   - unlimited: every block stays, so only first sightings are computed;
//   - pooled: one cache of the replicas' total KV capacity, least recently
//     used blocks evicted first and a conversation's last blocks before its
//     first (the order vLLM frees them): what a perfect router could reach
//     if the replicas' caches were one. It ignores that the replicas also
//     hold the generated tokens and the running requests, so real replicas
//     stay below it even with perfect placement.
//
// Both start empty at the replayed slice's start, as the replicas do. The
// replicas cache in blocks of 16 tokens, so on a partial block they can
// fall a few tokens short of this arithmetic.

// replayIdeal computes both over rows (indices into t.Rows, in arrival
// order); capacity is the pooled cache in tokens (0: not computed, NaN).
func replayIdeal(t *Trace, rows []int, capacity int) (unlimited, pooled float64) {
	seen := map[uint64]struct{}{}
	lru := newBlockLRU(capacity / t.Block)
	var total, hitAll, hitPooled int
	var keys []uint64
	for _, i := range rows {
		row := t.Rows[i]
		keys = chainHashes(keys[:0], row.HashIDs)
		total += row.Input
		k := 0
		for k < len(keys) {
			if _, ok := seen[keys[k]]; !ok {
				break
			}
			k++
		}
		hitAll += blockTokens(row, t.Block, k)
		for _, key := range keys {
			seen[key] = struct{}{}
		}
		if capacity > 0 {
			hitPooled += blockTokens(row, t.Block, lru.use(keys))
		}
	}
	if total == 0 {
		return math.NaN(), math.NaN()
	}
	unlimited, pooled = float64(hitAll)/float64(total), math.NaN()
	if capacity > 0 {
		pooled = float64(hitPooled) / float64(total)
	}
	return unlimited, pooled
}

// blockTokens is the tokens of row's first k blocks.
func blockTokens(row TraceRow, block, k int) int {
	if k == 0 {
		return 0
	}
	if k < len(row.HashIDs) {
		return k * block
	}
	return (k-1)*block + row.lastBlockTokens(block)
}

// blockLRU is an LRU set of block keys with a capacity in blocks.
type blockLRU struct {
	capacity   int
	at         map[uint64]int32 // key → node
	key        []uint64
	prev, next []int32
	head, tail int32 // head: most recently used
	free       []int32
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: capacity, at: map[uint64]int32{}, head: -1, tail: -1}
}

// use serves a request of keys (its chain, first block first): it returns
// how many leading keys were cached, then makes every key cached, the
// first ones most recent, evicting the least recent beyond capacity.
func (l *blockLRU) use(keys []uint64) int {
	hit := 0
	for hit < len(keys) {
		if _, ok := l.at[keys[hit]]; !ok {
			break
		}
		hit++
	}
	for i := len(keys) - 1; i >= 0; i-- { // the last block least recent
		l.touch(keys[i])
	}
	for len(l.at) > l.capacity {
		l.evict()
	}
	return hit
}

func (l *blockLRU) touch(key uint64) {
	if n, ok := l.at[key]; ok {
		l.unlink(n)
		l.pushFront(n)
		return
	}
	var n int32
	if len(l.free) > 0 {
		n, l.free = l.free[len(l.free)-1], l.free[:len(l.free)-1]
		l.key[n] = key
	} else {
		n = int32(len(l.key))
		l.key, l.prev, l.next = append(l.key, key), append(l.prev, -1), append(l.next, -1)
	}
	l.at[key] = n
	l.pushFront(n)
}

func (l *blockLRU) evict() {
	n := l.tail
	l.unlink(n)
	delete(l.at, l.key[n])
	l.free = append(l.free, n)
}

func (l *blockLRU) unlink(n int32) {
	p, x := l.prev[n], l.next[n]
	if p >= 0 {
		l.next[p] = x
	} else {
		l.head = x
	}
	if x >= 0 {
		l.prev[x] = p
	} else {
		l.tail = p
	}
	l.prev[n], l.next[n] = -1, -1
}

func (l *blockLRU) pushFront(n int32) {
	l.prev[n], l.next[n] = -1, l.head
	if l.head >= 0 {
		l.prev[l.head] = n
	} else {
		l.tail = n
	}
	l.head = n
}
