package sim

// blockCache is vLLM's block pool with automatic prefix caching: a fixed
// number of KV blocks; a full, computed block is registered under its chained
// key (hash of the parent block's key and its own tokens) so a later request
// with the same prefix reuses it; blocks nobody references sit in a free
// queue in LRU order and keep their key until the allocator takes them.
//
// Free queue order follows vLLM: a freed block goes to the tail, allocation
// takes the head, and a request frees its blocks last-first, so the tail of a
// conversation is evicted before its head.
type blockCache struct {
	key    []uint64 // key of a registered block
	hashed []bool   // registered in table
	ref    []int32  // running requests holding the block
	prev   []int32  // free queue links (-1: none)
	next   []int32
	inFree []bool

	head, tail int32 // free queue ends (-1: empty)
	nFree      int
	table      map[uint64]int32
}

const noBlock = -1

func newBlockCache(numBlocks int) *blockCache {
	c := &blockCache{
		key:    make([]uint64, numBlocks),
		hashed: make([]bool, numBlocks),
		ref:    make([]int32, numBlocks),
		prev:   make([]int32, numBlocks),
		next:   make([]int32, numBlocks),
		inFree: make([]bool, numBlocks),
		head:   noBlock,
		tail:   noBlock,
		table:  make(map[uint64]int32, numBlocks),
	}
	for b := range numBlocks {
		c.pushFree(int32(b))
	}
	return c
}

func (c *blockCache) numBlocks() int { return len(c.ref) }

// free is the number of blocks an allocation can take (empty or evictable).
func (c *blockCache) free() int { return c.nFree }

func (c *blockCache) pushFree(b int32) {
	c.prev[b], c.next[b] = c.tail, noBlock
	if c.tail != noBlock {
		c.next[c.tail] = b
	} else {
		c.head = b
	}
	c.tail = b
	c.inFree[b] = true
	c.nFree++
}

func (c *blockCache) removeFree(b int32) {
	p, n := c.prev[b], c.next[b]
	if p != noBlock {
		c.next[p] = n
	} else {
		c.head = n
	}
	if n != noBlock {
		c.prev[n] = p
	} else {
		c.tail = p
	}
	c.inFree[b] = false
	c.nFree--
}

// lookup returns the registered block with this key.
func (c *blockCache) lookup(key uint64) (int32, bool) {
	b, ok := c.table[key]
	return b, ok
}

// matchPrefix returns how many leading keys are cached, at most limit.
func (c *blockCache) matchPrefix(keys []uint64, limit int) int {
	n := 0
	for n < limit && n < len(keys) {
		if _, ok := c.table[keys[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// evictableAmong counts, of the first n keys (all cached), the blocks sitting
// in the free queue: taking them as hits shrinks what is left to allocate.
func (c *blockCache) evictableAmong(keys []uint64) int {
	k := 0
	for _, key := range keys {
		if c.inFree[c.table[key]] {
			k++
		}
	}
	return k
}

// touch takes a reference on a cached block (a prefix hit).
func (c *blockCache) touch(b int32) {
	if c.ref[b] == 0 && c.inFree[b] {
		c.removeFree(b)
	}
	c.ref[b]++
}

// allocate takes the least recently used free block, evicting its key. The
// caller has checked free() first.
func (c *blockCache) allocate() int32 {
	b := c.head
	c.removeFree(b)
	if c.hashed[b] {
		if c.table[c.key[b]] == b {
			delete(c.table, c.key[b])
		}
		c.hashed[b] = false
	}
	c.ref[b] = 1
	return b
}

// register makes a full, computed block findable under key. A block whose key
// another block already holds (two requests computed the same prefix at
// once) stays unregistered, as in vLLM.
func (c *blockCache) register(b int32, key uint64) {
	if c.hashed[b] {
		return
	}
	if _, dup := c.table[key]; dup {
		return
	}
	c.key[b], c.hashed[b] = key, true
	c.table[key] = b
}

// release drops one reference from each block, last block first, and queues
// unreferenced blocks for eviction (still findable until taken).
func (c *blockCache) release(blocks []int32) {
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		c.ref[b]--
		if c.ref[b] == 0 {
			c.pushFree(b)
		}
	}
}

// blockKey chains a block's key from its parent's key and its tokens.
func blockKey(parent uint64, tokens []uint32) uint64 {
	h := parent ^ 0xcbf29ce484222325
	for _, t := range tokens {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	return mix64(h)
}

// appendBlockKeys extends keys to cover every full block of tokens.
func appendBlockKeys(keys []uint64, tokens []uint32, blockSize int) []uint64 {
	for i := len(keys); (i+1)*blockSize <= len(tokens); i++ {
		var parent uint64
		if i > 0 {
			parent = keys[i-1]
		}
		keys = append(keys, blockKey(parent, tokens[i*blockSize:(i+1)*blockSize]))
	}
	return keys
}
