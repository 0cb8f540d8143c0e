package placement

import (
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/least"
)

// This file is the placement rule's frame (docs/placement.md): the load
// every least-loaded choice weighs, the spill threshold, and Place, which
// handles client pins, health and affinity and then hands the request to
// the model's policy (policy.go; each policy in its own policy_*.go).
// Everything else in the package feeds it numbers or reports what it did.

// Weights of load(r). The unit is "one request being served".
//
//	load(r) = max(inflight, running+waiting)   requests on the replica
//	        + loadPerWaiting * waiting          a waiting request costs 4 in all, as in vLLM's waiting*4+running
//	        + loadPerKVFull  * kv_usage         a full KV cache is worth this many requests: new work there waits or preempts
//	        + loadPerActive  * active_sessions  each active conversation pinned here will come back with a long prompt
//
// inflight is the warden's exact count (fresh); running and waiting are the
// replica's own gauges from the last poll (up to one poll interval old, and
// they include traffic that does not pass through the warden). Taking the
// max of the two counts instead of their sum avoids counting the warden's own
// requests twice while still seeing other clients' traffic. active_sessions
// are the sessions pinned here with a request in the last ActiveWindow
// (sessions.go): quiet ones have most likely ended and must not repel new
// ones for the whole TTL.
const (
	loadPerWaiting = 3.0
	loadPerKVFull  = 4.0
	loadPerActive  = 0.25
)

// load is load(r) above; call with m.mu held.
func (m *Model) load(i int) float64 {
	r := &m.reps[i]
	reqs := math.Max(float64(r.inFlight), r.metrics.Running+r.metrics.Waiting)
	return reqs + loadPerWaiting*r.metrics.Waiting + loadPerKVFull*r.metrics.KVUsage +
		loadPerActive*float64(m.sessions.active[i])
}

// leastLoaded returns the healthy replica with the lowest load, other than
// exclude (-1: none), or -1. Ties go to the first one scanned from a start
// index that rotates each call, so idle replicas fill evenly.
func (m *Model) leastLoaded(exclude int) int {
	return least.By(&m.start, len(m.reps), func(i int) (float64, bool) {
		return m.load(i), i != exclude && m.reps[i].healthy
	})
}

// spillThreshold is the in-flight count at which a pinned session's request
// spills (call with m.mu held). A number in the config is used as is. With
// `auto` it is derived from what replica i can batch, in this order:
//  1. the largest running count observed while requests were also waiting
//     (the replica was saturated: that is how many it could batch then);
//  2. KV capacity (vllm:cache_config_info num_gpu_blocks*block_size)
//     divided by the mean prompt size seen so far (PromptBytes/4 tokens):
//     how many prompts of the usual size its cache holds at once;
//  3. DefaultSpillThreshold while neither is known.
//
// The larger of 1 and 2 wins, and never less than minAutoSpill: spilling
// throws away the session's cache, so it is for real pressure only.
func (m *Model) spillThreshold(i int) int {
	if !m.cfg.SpillThreshold.Auto {
		return m.cfg.SpillThreshold.N
	}
	r := &m.reps[i]
	n, known := int(r.saturatedRunning), r.saturatedRunning >= 1
	if r.metrics.KVCapacityTokens > 0 && m.meanPromptTokens >= 1 {
		n, known = max(n, int(r.metrics.KVCapacityTokens/m.meanPromptTokens)), true
	}
	if !known {
		return config.DefaultSpillThreshold
	}
	return max(minAutoSpill, min(maxAutoSpill, n))
}

// minAutoSpill is the floor of the auto threshold: the fixed threshold
// that was the default before auto. Under it, a replica that batches few
// long prompts (four A4000s, 47K tokens of cache each, sessions of
// 12-15K) spilled sessions whose cache it still held: at 16 sessions
// sticky's hit rate fell from 87% to 40% and its throughput by 15% (seed
// 2); with the floor the A4000 tables are those of the fixed 8, and an
// H200 that batches 40 conversations keeps them (docs/placement.md).
const minAutoSpill = config.DefaultSpillThreshold

// maxAutoSpill caps the auto threshold at vLLM's default max_num_seqs.
const maxAutoSpill = 256

// bytesPerToken converts a prompt's Content-Length into tokens (JSON bodies
// of English text and code run at about 4 bytes a token).
const bytesPerToken = 4

// promptTokens is r's prompt size in tokens, from its Content-Length,
// capped at the largest replica's KV capacity (call with m.mu held). The
// length is the client's word, known before a byte of body arrives: a
// client that announces 10^18 bytes and closes must not make its session
// look larger than any cache (every replica "full" for admission, every
// other session's cache "evicted", the auto spill threshold at its floor).
// No replica can serve a prompt larger than its cache anyway.
func (m *Model) promptTokens(r Request) float64 {
	if r.PromptBytes <= 0 {
		return 0
	}
	largest := 0.0
	for i := range m.reps {
		largest = max(largest, m.capacity(i))
	}
	return min(float64(r.PromptBytes)/bytesPerToken, largest)
}

// Place chooses a replica for one request and counts it in flight. The rule:
//   - a client-pinned header naming a valid, healthy replica wins (counted
//     client_pinned); an invalid one is ignored, counted, and routing goes on;
//   - affinity off in the one-endpoint shape: no rank header, vLLM decides;
//   - affinity off in the per-replica shape: policy vllm-lb;
//   - otherwise the model's policy decides. Sticky (policy_sticky.go)
//     keeps the session table itself: no session id -> least loaded, not
//     pinned (unaffined); new session -> least loaded, pinned; known
//     session -> its pinned replica, unless that one has >= spill
//     threshold requests in flight (then least loaded among the others,
//     counted spilled in there, the session stays pinned) or is unhealthy
//     (then placed again and repinned);
//   - every other policy picks by its own rule and the session follows (its
//     pin records where its latest turn went, which is where its cache is).
func (m *Model) Place(r Request) (Placement, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.placingBodyPending = r.BodyPending
	m.placingTokens = -1
	defer func() { m.placingBodyPending, m.placingTokens = false, -1 }()
	now := r.Now.UnixNano()
	m.sessions.sweep(now, sweepPerPlace)
	if r.PromptBytes > 0 && !r.NonInference {
		tokens := m.promptTokens(r)
		if m.meanPromptTokens == 0 {
			m.meanPromptTokens = tokens
		} else {
			m.meanPromptTokens += (tokens - m.meanPromptTokens) / 16
		}
		if !r.BodyPending {
			m.placingTokens = int64(tokens)
		}
	}
	var conv conversation
	if !r.NonInference {
		conv = m.conversationOf(r)
	}
	h := conv.key
	pos := -1
	switch {
	case r.NonInference: // placed as if it had no key, and not counted
	case h != 0:
		m.keyed[conv.kind]++
		pos = m.sessions.lookup(h, now)
	default:
		m.keyed[ConvNone]++
		m.unaffined++ // whatever decides, a request without a conversation key is unaffined
	}
	if pos >= 0 {
		conv.change, conv.side = m.sessions.contextOf(pos, r)
		if conv.change == freshContext {
			m.peerForgetContext(h)
		}
	}
	m.placing = conv
	m.placingBytes = r.PromptBytes
	defer func() { m.placing = conversation{} }()

	if r.PinnedHeader != "" && !m.pinTrusted(r.Source) {
		m.untrustedPins++
	} else if r.PinnedHeader != "" {
		if i, ok := m.parsePin(r.PinnedHeader); ok {
			if pos >= 0 {
				m.countStay(pos, i)
			} else if h != 0 {
				pos = m.sessions.insert(conv, i, now)
			}
			return m.commit(i, KindClientPinned, h, pos, now), nil
		}
		m.invalidPins++
	}

	healthy := false
	for i := range m.reps {
		healthy = healthy || m.reps[i].healthy
	}
	if !healthy {
		m.noHealthy++
		return Placement{Replica: -1, RankHeader: -1}, ErrNoHealthyReplica
	}

	impl := m.active
	if !m.affinity {
		if m.oneEndpoint {
			m.inFlight++
			m.vllmDecided++
			return Placement{Replica: -1, Addr: m.endpoint, RankHeader: -1, Kind: KindBalanced, SessionHash: h}, nil
		}
		impl = m.impls[config.PolicyVLLMLB]
	} else if m.activePlacer != nil {
		return m.activePlacer.place(m, conv, pos, r), nil
	}
	i := impl.pick(m, h, r)
	if h != 0 {
		if pos < 0 {
			pos = m.sessions.insert(conv, i, now)
		} else {
			m.countStay(pos, i)
			m.sessions.repin(pos, i)
		}
	}
	return m.commit(i, KindBalanced, h, pos, now), nil
}

// countStay updates the sticky share for a known session going to replica i
// (for rules that do not count it themselves).
func (m *Model) countStay(pos, i int) {
	if int(m.sessions.slots[pos].replica) == i {
		m.stayed++
	} else {
		m.moved++
	}
}

// commit counts the request on replica i, marks the session at table
// position pos (-1: none) active, and builds the Placement.
func (m *Model) commit(i int, kind PlacementKind, h uint64, pos int, now int64) Placement {
	if pos >= 0 {
		m.sessions.turn(pos, now, m.placingTokens)
		if m.placing.key == h {
			m.sessions.noteContext(pos, m.placing.change, m.placingBytes, i)
		}
	}
	r := &m.reps[i]
	if m.placingBodyPending {
		r.awaitingBody++
	} else {
		r.inFlight++
	}
	r.requests[kind]++
	m.inFlight++
	p := Placement{Replica: i, Addr: r.addr, RankHeader: -1, Kind: kind, SessionHash: h, awaitingBody: m.placingBodyPending}
	if m.oneEndpoint {
		p.RankHeader = i
	}
	return p
}

// pinTrusted reports whether a client at src may pin its requests: it is
// within pin_sources (or an in-process caller, with no address).
func (m *Model) pinTrusted(src netip.Addr) bool {
	if !src.IsValid() {
		return true
	}
	src = src.Unmap()
	for _, p := range m.pinSources {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// parsePin reads a client-pinned header: a replica index (the rank, in
// X-data-parallel-rank), or a replica's URL or host:port (X-Warden-Replica).
// A replica that does not exist or is unhealthy is not valid.
func (m *Model) parsePin(v string) (int, bool) {
	v = strings.TrimSpace(v)
	i, err := strconv.Atoi(v)
	if err != nil {
		i = -1
		for j := range m.reps {
			if !m.oneEndpoint && (v == m.reps[j].url || v == m.reps[j].addr) {
				i = j
				break
			}
		}
	}
	if i < 0 || i >= len(m.reps) || !m.reps[i].healthy {
		return -1, false
	}
	return i, true
}

// Retry is for a connect that failed before any byte went upstream: it
// releases p's replica and places the request once more on the next-best
// healthy replica (the session, if pinned there, moves with it). A second
// Retry of the same request fails with ErrRetryExhausted; on any error p is
// already released, so do not call Done.
func (m *Model) Retry(p Placement, now time.Time) (Placement, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.Replica >= 0 && p.Replica < len(m.reps) {
		r := &m.reps[p.Replica]
		r.release(p.awaitingBody)
		r.retriedAway++
	}
	if p.retried {
		if m.inFlight > 0 {
			m.inFlight--
		}
		m.retryFailed++
		return p, ErrRetryExhausted
	}
	if p.Replica < 0 { // vLLM decides: the same endpoint once more
		p.retried = true
		return p, nil
	}
	i := m.leastLoaded(p.Replica)
	if i < 0 {
		if m.inFlight > 0 {
			m.inFlight--
		}
		m.retryFailed++
		return p, ErrNoHealthyReplica
	}
	if p.SessionHash != 0 {
		if pos := m.sessions.find(p.SessionHash); pos >= 0 && int(m.sessions.slots[pos].replica) == p.Replica {
			m.sessions.repin(pos, i)
		}
	}
	r := &m.reps[i]
	if p.awaitingBody {
		r.awaitingBody++
	} else {
		r.inFlight++
	}
	q := Placement{Replica: i, Addr: r.addr, RankHeader: -1, Kind: p.Kind, SessionHash: p.SessionHash, retried: true, awaitingBody: p.awaitingBody}
	if m.oneEndpoint {
		q.RankHeader = i
	}
	return q, nil
}
