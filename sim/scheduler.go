package sim

import (
	"strings"
	"time"
)

// engine is one replica: vLLM v1's scheduler over a blockCache. It has no
// clock of its own: a driver (Virtual, or the real-mode pacer on top of it)
// calls beginStep at a step's start and endStep at the time the step model
// says it ends.
//
// Scheduling follows vLLM v1: running requests first, in admission order,
// each getting what it still needs (1 token for a decode, the rest of its
// prompt for a prefill) up to the step's token budget (chunked prefill); when
// a running request cannot get a block, the last admitted running request is
// preempted (its blocks freed, recomputed later, ahead of the queue). Then,
// if nothing was preempted, waiting requests are admitted in order while the
// budget, max_num_seqs and free blocks allow, reusing their cached prefix.
type engine struct {
	p     Profile
	cache *blockCache

	waiting []*seq // head first; preempted requests go back to the head
	running []*seq
	byID    map[uint64]*seq

	stepping  bool
	scheduled []*seq // the step in flight

	stats  Stats
	onTTFT func(seconds float64) // optional histogram hooks
	onITL  func(seconds float64)
}

// seq is a request inside the engine.
type seq struct {
	req         *Request
	arrival     time.Time
	lastToken   time.Time // when the last output token was sampled
	tokens      []uint32  // prompt then generated tokens
	promptLen   int
	keys        []uint64 // chained key of every full block of tokens
	blocks      []int32  // KV blocks held, covering computed (+ this step's) tokens
	computed    int      // tokens whose KV is computed
	registered  int      // leading blocks registered in the cache
	cached      int      // prefix-hit tokens at first admission
	admitted    bool
	preemptions int
	outputs     int
	seed        uint64
	script      string   // Request.Reply: what the model says if nothing cuts it short
	scriptTok   []uint32 // its tokens
	text        strings.Builder
	emitted     int // bytes of text streamed (stop sequences hold some back)

	stepTokens int // tokens computed in the step in flight
	running    bool
	finished   bool
	abortAsked bool
}

func newEngine(p Profile) *engine {
	return &engine{
		p: p,
		// vLLM's block pool keeps one block aside as the null block
		cache: newBlockCache(p.NumBlocks() - 1),
		byID:  make(map[uint64]*seq),
		stats: Stats{KVCapacityTokens: p.KVTokens()},
	}
}

func (e *engine) hasWork() bool { return len(e.waiting) > 0 || len(e.running) > 0 }

// submit queues a request, or finishes it at once when it cannot run.
func (e *engine) submit(now time.Time, r *Request) {
	if r.MaxTokens < 1 {
		r.MaxTokens = 1
	}
	switch {
	case len(r.Prompt) == 0:
		done(r, now, Result{Err: ErrEmptyPrompt, FinishReason: "abort"})
		return
	case len(r.Prompt)+r.MaxTokens > e.p.ContextLimit():
		done(r, now, Result{PromptTokens: len(r.Prompt), Err: ErrPromptTooLong, FinishReason: "abort"})
		return
	}
	s := &seq{
		req:       r,
		arrival:   now,
		tokens:    r.Prompt[:len(r.Prompt):len(r.Prompt)], // appends copy, never touch the caller's array
		promptLen: len(r.Prompt),
		seed:      outputSeed(r.Prompt),
	}
	if r.Reply != "" {
		s.script, s.scriptTok = r.Reply, Tokenize(r.Reply)
	}
	s.keys = appendBlockKeys(make([]uint64, 0, (len(r.Prompt)+r.MaxTokens)/e.p.BlockSize+1), s.tokens, e.p.BlockSize)
	e.byID[r.ID] = s
	e.waiting = append(e.waiting, s)
}

// abort ends a request now, or at the end of the step computing it.
func (e *engine) abort(now time.Time, id uint64) {
	s, ok := e.byID[id]
	if !ok {
		return
	}
	if s.stepTokens > 0 {
		s.abortAsked = true
		return
	}
	if !s.running {
		for i, w := range e.waiting {
			if w == s {
				e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
				break
			}
		}
	}
	e.finish(now, s, "abort", "", ErrAborted)
	e.dropFinished()
}

// beginStep schedules one step starting at now and returns when it ends;
// false when there is nothing to run.
func (e *engine) beginStep(now time.Time) (time.Time, bool) {
	if e.stepping {
		panic("sim: beginStep while a step is in flight")
	}
	var load stepLoad
	for try := 0; try < 2; try++ {
		var preempted bool
		load, preempted = e.schedule(now)
		if len(e.scheduled) > 0 || !preempted {
			break
		}
		// everything running was preempted: admit from the queue at once
	}
	if len(e.scheduled) == 0 {
		return now, false
	}
	e.stepping = true
	return now.Add(e.p.cost(load)), true
}

func (e *engine) schedule(now time.Time) (stepLoad, bool) {
	var load stepLoad
	bs := e.p.BlockSize
	budget := e.p.MaxNumBatchedTokens
	e.scheduled = e.scheduled[:0]
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(len(s.tokens)-s.computed, budget)
		if n <= 0 {
			continue
		}
		for !e.grow(s, s.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if !s.running {
			break
		}
		s.stepTokens = n
		load.add(s.computed, n)
		budget -= n
		e.scheduled = append(e.scheduled, s)
	}
	if preempted {
		return load, true
	}

	for len(e.waiting) > 0 && budget > 0 && len(e.running) < e.p.MaxNumSeqs {
		s := e.waiting[0]
		// At least one token is always computed, for the logits.
		hits := e.cache.matchPrefix(s.keys, (len(s.tokens)-1)/bs)
		start := hits * bs
		if e.p.PrefixStats == PrefixStatsEveryLookup && s.preemptions == 0 {
			// vLLM before pull request 48860 recorded the lookup itself,
			// whether or not the request could then be admitted.
			e.stats.PrefixQueries += uint64(len(s.tokens))
			e.stats.PrefixHits += uint64(start)
		}
		if !e.admits(s, hits, min(len(s.tokens)-start, budget)) {
			e.stats.AdmissionWaits++
			break // the head waits for blocks; nobody overtakes it (FCFS)
		}
		n := min(len(s.tokens)-start, budget)
		for _, key := range s.keys[:hits] {
			b, _ := e.cache.lookup(key)
			e.cache.touch(b)
			s.blocks = append(s.blocks, b)
		}
		for range (start+n+bs-1)/bs - hits {
			s.blocks = append(s.blocks, e.cache.allocate())
		}
		s.computed, s.registered = start, hits
		if !s.admitted {
			if e.p.PrefixStats != PrefixStatsEveryLookup {
				// once, at admission; re-admissions after a preemption are
				// vLLM's separate preempted_* counts, outside these
				e.stats.PrefixQueries += uint64(len(s.tokens))
				e.stats.PrefixHits += uint64(start)
			}
			s.admitted, s.cached = true, start
			if s.req.OnScheduled != nil {
				s.req.OnScheduled(now, start)
			}
		}
		e.waiting = e.waiting[1:]
		s.running = true
		e.running = append(e.running, s)
		s.stepTokens = n
		load.add(s.computed, n)
		budget -= n
		e.scheduled = append(e.scheduled, s)
	}
	return load, false
}

// admits is vLLM's admission test for the waiting head with hits cached
// blocks and n tokens to compute this step (kv_cache_manager.py,
// KVCacheManager.allocate_slots): a cached block that sits in the free
// queue counts as one more block to take (it leaves the free queue), and
// with scheduler_reserve_full_isl the whole prompt (all its tokens, output
// included after a preemption) must fit before the first chunk is given
// blocks; without it, only the first chunk. The watermark keeps a share of
// the blocks free from admissions while anything runs.
func (e *engine) admits(s *seq, hits, n int) bool {
	bs := e.p.BlockSize
	revived := e.cache.evictableAmong(s.keys[:hits])
	reserve := 0
	if len(e.running) > 0 {
		reserve = int(e.p.Watermark * float64(e.cache.numBlocks()))
	}
	if e.p.ReserveFullISL {
		full := min(len(s.tokens), e.p.MaxModelLen)
		if (full+bs-1)/bs-hits+revived+reserve > e.cache.free() {
			return false
		}
	}
	return (hits*bs+n+bs-1)/bs-hits+revived+reserve <= e.cache.free()
}

// grow gives s blocks for its first total tokens; false when blocks run out.
func (e *engine) grow(s *seq, total int) bool {
	need := (total+e.p.BlockSize-1)/e.p.BlockSize - len(s.blocks)
	if need > e.cache.free() {
		return false
	}
	for range need {
		s.blocks = append(s.blocks, e.cache.allocate())
	}
	return true
}

// preempt frees a running request's blocks (still cached until evicted) and
// puts it back at the head of the queue to be recomputed.
func (e *engine) preempt(s *seq) {
	e.cache.release(s.blocks)
	s.blocks = s.blocks[:0]
	s.computed, s.registered = 0, 0
	s.running = false
	s.preemptions++
	e.waiting = append([]*seq{s}, e.waiting...)
	e.stats.Preemptions++
}

// endStep applies the step in flight: computed tokens, newly full blocks
// registered in the cache, one sampled token for every sequence whose
// tokens are all computed, and finished requests released.
func (e *engine) endStep(now time.Time) {
	bs := e.p.BlockSize
	finishedAny := false
	for _, s := range e.scheduled {
		n := s.stepTokens
		s.stepTokens = 0
		if s.abortAsked {
			e.finish(now, s, "abort", "", ErrAborted)
			finishedAny = true
			continue
		}
		s.computed += n
		for ; (s.registered+1)*bs <= s.computed; s.registered++ {
			e.cache.register(s.blocks[s.registered], s.keys[s.registered])
		}
		if s.computed < len(s.tokens) {
			continue // prefill continues next step
		}
		if s.outputs == 0 {
			e.stats.PromptTokens += uint64(s.promptLen)
			ttft := now.Sub(s.arrival).Seconds()
			e.stats.TTFTSum += ttft
			e.stats.TTFTCount++
			if e.onTTFT != nil {
				e.onTTFT(ttft)
			}
			if s.req.OnFirstToken != nil {
				s.req.OnFirstToken(now)
			}
		} else {
			itl := now.Sub(s.lastToken).Seconds()
			e.stats.ITLSum += itl
			e.stats.ITLCount++
			if e.onITL != nil {
				e.onITL(itl)
			}
		}
		s.lastToken = now
		tok, piece := s.nextToken()
		s.tokens = append(s.tokens, tok)
		s.keys = appendBlockKeys(s.keys, s.tokens, bs)
		s.outputs++
		e.stats.GenerationTokens++
		if len(s.req.Stop) > 0 {
			if e.emitWithStops(now, s, piece) {
				finishedAny = true
			}
			continue
		}
		s.text.WriteString(piece)
		if s.req.OnToken != nil {
			s.req.OnToken(now, piece)
		}
		if s.ended() {
			e.finish(now, s, "stop", "", nil)
			finishedAny = true
		} else if s.outputs >= s.req.MaxTokens {
			e.finish(now, s, "length", "", nil)
			finishedAny = true
		}
	}
	e.scheduled = e.scheduled[:0]
	e.stepping = false
	if finishedAny {
		e.dropFinished()
	}
}

// nextToken is the token the model samples next: the next piece of its
// reply, or filler words when it has no reply to end (ignore_eos).
func (s *seq) nextToken() (uint32, string) {
	if s.script == "" {
		return outputToken(s.seed, s.outputs)
	}
	at := s.outputs * BytesPerToken
	return s.scriptTok[s.outputs], s.script[at:min(at+BytesPerToken, len(s.script))]
}

// ended says whether the model has said all it had to say (its end-of-
// sequence token): the reply stops by itself, finish reason "stop".
func (s *seq) ended() bool { return s.script != "" && s.outputs >= len(s.scriptTok) }

// emitWithStops appends piece and streams only text that cannot be the start
// of a stop sequence, as vLLM holds back a possible stop; on a match the
// output ends before it. It reports whether s finished.
func (e *engine) emitWithStops(now time.Time, s *seq, piece string) bool {
	hold := maxLen(s.req.Stop) - 1
	before := s.text.Len()
	s.text.WriteString(piece)
	all := s.text.String()
	from := max(0, before-hold)
	best, stop := -1, ""
	for _, st := range s.req.Stop {
		if st == "" {
			continue
		}
		if i := strings.Index(all[from:], st); i >= 0 && (best < 0 || from+i < best) {
			best, stop = from+i, st
		}
	}
	switch {
	case best >= 0:
		e.deliver(now, s, all[:best])
		s.text.Reset()
		s.text.WriteString(all[:best])
		e.finish(now, s, "stop", stop, nil)
		return true
	case s.ended():
		e.deliver(now, s, all)
		e.finish(now, s, "stop", "", nil)
		return true
	case s.outputs >= s.req.MaxTokens:
		e.deliver(now, s, all)
		e.finish(now, s, "length", "", nil)
		return true
	default:
		e.deliver(now, s, all[:max(s.emitted, len(all)-hold)])
		return false
	}
}

// deliver streams text[s.emitted:] if any.
func (e *engine) deliver(now time.Time, s *seq, text string) {
	if len(text) > s.emitted {
		if s.req.OnToken != nil {
			s.req.OnToken(now, text[s.emitted:])
		}
		s.emitted = len(text)
	}
}

func maxLen(ss []string) int {
	m := 0
	for _, s := range ss {
		m = max(m, len(s))
	}
	return m
}

// finish releases a request's blocks and reports its result.
func (e *engine) finish(now time.Time, s *seq, reason, stop string, err error) {
	s.finished = true
	if len(s.blocks) > 0 {
		e.cache.release(s.blocks)
		s.blocks = nil
	}
	delete(e.byID, s.req.ID)
	e.stats.RequestsDone++
	done(s.req, now, Result{
		PromptTokens: s.promptLen,
		CachedTokens: s.cached,
		OutputTokens: s.outputs,
		OutputText:   s.text.String(),
		FinishReason: reason,
		StopSequence: stop,
		Err:          err,
	})
}

func (e *engine) dropFinished() {
	k := 0
	for _, s := range e.running {
		if !s.finished {
			e.running[k] = s
			k++
		}
	}
	clear(e.running[k:])
	e.running = e.running[:k]
}

func done(r *Request, at time.Time, res Result) {
	if r.OnDone != nil {
		r.OnDone(at, res)
	}
}

// snapshot returns the engine's Stats with the gauges filled in.
func (e *engine) snapshot() Stats {
	s := e.stats
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	n := e.cache.numBlocks()
	s.KVUsage = 1 - float64(e.cache.free())/float64(n)
	return s
}
