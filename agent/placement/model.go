package placement

import (
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
)

// PlacementKind says how a request's replica was chosen.
type PlacementKind uint8

const (
	// KindNew: first request of a session, least-loaded replica, now pinned.
	KindNew PlacementKind = iota
	// KindSticky: a known session on its pinned replica.
	KindSticky
	// KindSpilled: a known session whose replica had reached the spill
	// threshold, sent to the least-loaded replica; the session stays pinned.
	KindSpilled
	// KindClientPinned: the client named a valid replica in
	// X-data-parallel-rank or X-Warden-Replica.
	KindClientPinned
	// KindUnaffined: no session id; least-loaded replica, nothing pinned.
	KindUnaffined
	// KindBalanced: chosen by a policy other than sticky (affinity off,
	// vllm-lb, shortest-queue, round-robin, random, hash).
	KindBalanced
	// KindRepinned: a known session whose replica became unhealthy, placed
	// again on the least-loaded replica and pinned there.
	KindRepinned
	// KindFresh: a known conversation whose prompt starts over (the client
	// said its context was compacted, or a prompt under half the size of
	// the conversation's last): nothing of it is cached anywhere but the
	// shared prefix, so it goes to the least-loaded replica
	// (conversation.go, "Contexts that start over").
	KindFresh

	NumKinds
)

var kindNames = [NumKinds]string{"new", "sticky", "spilled", "client_pinned", "unaffined", "balanced", "repinned", "fresh"}

// String is the name used in metrics labels and JSON.
func (k PlacementKind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request is what the shim (or the virtual bench) knows when it asks for a
// replica.
type Request struct {
	// SessionID is the raw id from the first session header present; it is
	// hashed inside Place and never stored. "" when there is none.
	SessionID string
	// AgentID is the raw id from the first agent header present (a Claude
	// Code subagent): with SessionID it keys a conversation of its own.
	// Hashed, never stored.
	AgentID string
	// ParentAgentID names the agent that started AgentID's (Claude Code's
	// x-claude-code-parent-agent-id); "" when the session's main
	// conversation did. It only says where the conversation belongs.
	ParentAgentID string
	// ContextCompacted: the client says the conversation's context was
	// compacted (Claude Code's x-claude-code-context-compacted): the prompt
	// starts over from a summary.
	ContextCompacted bool
	// BodyStart is the stable start of the body (l7/bodykey) of a request
	// without a session id; it keys the conversation when the model's
	// body_key is on. Hashed, never stored.
	BodyStart []byte
	// PinnedHeader is the value of X-data-parallel-rank or X-Warden-Replica
	// when the client sent one, else "".
	PinnedHeader string
	// PromptBytes is the request body's Content-Length (0 if unknown).
	PromptBytes int64
	// BodyPending: the request's body has not arrived whole yet. Until
	// BodyArrived the request counts in flight but not in the load that
	// steers other requests (a client that announces a body and never
	// sends it must not push sessions off their replica).
	BodyPending bool
	// NonInference: the request is not a prompt for the model (a health
	// check, a model list, metrics: anything but an inference API's
	// POST). It is placed without its session: it neither creates nor
	// refreshes an entry of the session table, so a client cannot fill
	// the table, or keep entries in it, with requests that cost nothing.
	NonInference bool
	// Source is the client's address; PinnedHeader is honoured only from
	// the model's pin_sources. The zero value (an in-process caller, the
	// virtual bench) is trusted.
	Source netip.Addr
	Now    time.Time
	// arrived is when a request that admission kept waiting reached the
	// warden (zero: Now).
	arrived time.Time
	// waited is how long it waited at the warden (seconds).
	waited float64
	// roomOn is 1 + the replica admission granted it room on after a wait
	// (0: none); policy sticky places it there.
	roomOn int
}

// Placement is the answer: where to send the request. Hand it back to Retry
// or Done unchanged.
type Placement struct {
	// Replica is the chosen replica index, or -1 when vLLM's own balancer
	// decides (affinity off in the one-endpoint shape).
	Replica int
	// Addr is the host:port to dial.
	Addr string
	// RankHeader is -1 (write no rank header; strip the client's) or N
	// (write X-data-parallel-rank: N, replacing any the client sent).
	RankHeader  int
	Kind        PlacementKind
	SessionHash uint64 // 0 without a session id
	retried     bool
	// awaitingBody: counted in awaitingBody, not inFlight, until BodyArrived.
	awaitingBody bool
}

// ReplicaMetrics is what the poller (or the virtual bench) read from one
// replica. Counters are cumulative as the replica exports them.
type ReplicaMetrics struct {
	Healthy          bool
	Running, Waiting float64
	KVUsage          float64 // 0-1
	PrefixQueries    float64
	PrefixHits       float64
	PromptTokens     float64
	GenerationTokens float64
	TTFTSum          float64
	TTFTCount        float64
	// KVCapacityTokens is num_gpu_blocks*block_size from
	// vllm:cache_config_info (0 if the replica does not export it).
	KVCapacityTokens float64
}

// ModelOptions are the run-time settings that are not in ModelConfig.
type ModelOptions struct {
	// Hasher hashes session ids; the zero value means a random key. The
	// Warden passes one hasher to all models (from the config's hash_key).
	Hasher *SessionHasher
	// Sink mirrors the session table (nil: none).
	Sink SessionSink
	// Seed seeds the random policy (deterministic A/B runs).
	Seed uint64
	// HitRateWindow is the window of the prefix hit rate (0: default).
	HitRateWindow time.Duration
}

// replica is the model's view of one replica (or rank).
type replica struct {
	url  string
	addr string
	// healthy: takes new placements (up and not draining); what every
	// policy reads. up is the poller's verdict, reason why it is not (or
	// why its last poll failed), draining the operator's (health.go).
	healthy  bool
	up       bool
	draining bool
	reason   string

	inFlight     int // requests whose body has arrived: what steers placement
	awaitingBody int // requests placed here whose body has not arrived yet
	requests     [NumKinds]uint64
	retriedAway  uint64 // connect failures that moved a request elsewhere
	pollFailures uint64

	metrics    ReplicaMetrics
	observed   bool
	observedAt time.Time
	// saturatedRunning is the running count last seen while requests were
	// waiting: what the replica can batch (spill_threshold auto).
	saturatedRunning float64
	hitRate          hitRateWindow
}

// Model is the placement state of one served model: replicas, their load
// and health, the session table and the counters. It starts no goroutines
// and reads no clock: every time comes in as an argument, so the virtual
// bench drives it on simulated time. It is safe for concurrent use.
type Model struct {
	mu sync.Mutex

	cfg         config.ModelConfig
	hasher      SessionHasher
	oneEndpoint bool
	endpoint    string // host:port of the one endpoint (shape 2)
	reps        []replica
	affinity    bool
	policy      config.Policy
	sessions    *sessionTable

	inFlight  int
	unaffined uint64
	// keyed counts requests by what identified their conversation.
	keyed       [NumConversationKinds]uint64
	invalidPins uint64
	// untrustedPins: pins from a client outside pin_sources, ignored.
	untrustedPins uint64
	pinSources    []netip.Prefix
	// placingBodyPending is the request being placed's BodyPending, for
	// commit (set under mu for the duration of Place).
	placingBodyPending bool
	// placing and placingBytes are the conversation and body size of the
	// request being placed, for commit (conversation.go).
	placing      conversation
	placingBytes int64
	// placingTokens is its prompt in tokens when its body is in hand
	// (-1: not known yet), which weighs its session (evict.go).
	placingTokens int64
	noHealthy     uint64
	retryFailed   uint64
	vllmDecided   uint64 // affinity off, one endpoint: no replica of ours chosen
	stayed        uint64 // known session, same replica as its pin
	moved         uint64 // known session, another replica

	// mean prompt size in tokens (EWMA of PromptBytes/4), for auto spill.
	meanPromptTokens float64

	// start is the rotating start index that breaks ties in every
	// least-loaded scan (internal/least), one per model: the policies'
	// scans and the fallbacks between them share one rotation.
	start int
	// rr is the round robin's turn (policy_round_robin.go), shared by the
	// policies that fall back to it.
	rr int

	// impls holds the model's instance of every registered policy
	// (policy.go), so that each keeps its own state across SetPolicy;
	// active is the one m.policy names; observers are those that learn
	// from every poll.
	impls        map[config.Policy]policy
	active       policy
	activePlacer sessionPlacer // active, when it places sessions itself (else nil)
	observers    []replicaObserver

	peer *peerState // the cost model: cost-aware policies and admission (costmodel.go)

	lat *latencyStats // what the shim measured (latency.go)
}

// NewModel builds the placement state of one model from its (validated)
// configuration. It starts nothing.
func NewModel(mc config.ModelConfig, opts ModelOptions) (*Model, error) {
	if err := mc.Validate("model " + mc.Name); err != nil {
		return nil, err
	}
	m := &Model{
		cfg:         mc,
		oneEndpoint: mc.OneEndpoint(),
		affinity:    mc.Affinity,
		policy:      mc.Policy,
	}
	if opts.Hasher != nil {
		m.hasher = *opts.Hasher
	} else {
		m.hasher = NewSessionHasher(nil)
	}
	window := opts.HitRateWindow
	if window <= 0 {
		window = config.DefaultHitRateWindow
	}
	n := mc.ReplicaCount()
	if n > MaxReplicas {
		return nil, fmt.Errorf("%w: model %s: %d replicas, at most %d", config.ErrInvalidConfig, mc.Name, n, MaxReplicas)
	}
	m.reps = make([]replica, n)
	if m.oneEndpoint {
		m.endpoint = hostPort(mc.Endpoint)
		for i := range m.reps {
			m.reps[i].url = fmt.Sprintf("%s#rank=%d", mc.Endpoint, i)
			m.reps[i].addr = m.endpoint
		}
	} else {
		for i, u := range mc.Replicas {
			m.reps[i].url = u
			m.reps[i].addr = hostPort(u)
		}
	}
	for i := range m.reps {
		m.reps[i].healthy, m.reps[i].up = true, true // until the poller says otherwise
		m.reps[i].hitRate.window = window
	}
	m.sessions = newSessionTable(n, mc.SessionTTL, opts.Sink)
	m.sessions.onRemove = m.peerForget
	max := mc.MaxSessions
	if max == 0 {
		max = config.DefaultMaxSessions // a config built in code
	}
	m.sessions.setLimit(max)
	for _, src := range mc.PinSources {
		p, _ := config.ParsePinSource(src) // validated above
		m.pinSources = append(m.pinSources, p)
	}
	m.peer = newPeerState(n)
	m.lat = newLatencyStats(n)
	m.newPolicies(opts)
	if mc.Admission.Mode != "" {
		if err := m.SetAdmission(mc.Admission); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func hostPort(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}

// Name is the model's name (admin API path, metric label).
func (m *Model) Name() string { return m.cfg.Name }

// Frontend is the address clients connect to.
func (m *Model) Frontend() string { return m.cfg.Frontend }

// SessionHeaders are the headers that carry a session id, in order.
func (m *Model) SessionHeaders() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.SessionHeaders
}

// OneEndpoint reports the one-endpoint deployment shape (rank header).
func (m *Model) OneEndpoint() bool { return m.oneEndpoint }

// Replicas is the number of replicas (or ranks).
func (m *Model) Replicas() int { return len(m.reps) }

// ReplicaURL is replica i's URL (shape 2: the endpoint with #rank=i).
func (m *Model) ReplicaURL(i int) string { return m.reps[i].url }

// Config returns a copy of the model's configuration.
func (m *Model) Config() config.ModelConfig { return m.cfg }

// HashSession is the keyed hash Place uses for a session id (0 for "").
func (m *Model) HashSession(id string) uint64 {
	if id == "" {
		return 0
	}
	return m.hasher.Hash(id)
}

// SetAffinity switches affinity at run time. Off hands the choice to vLLM:
// no rank header in the one-endpoint shape, policy vllm-lb otherwise.
func (m *Model) SetAffinity(on bool) {
	m.mu.Lock()
	m.affinity = on
	if !on {
		m.releaseAllParked() // admission no longer decides: nobody waits
	}
	m.mu.Unlock()
}

// Affinity reports whether affinity is on.
func (m *Model) Affinity() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.affinity
}

// SetPolicy changes the policy used while affinity is on.
func (m *Model) SetPolicy(p config.Policy) error {
	p, err := config.ParsePolicy(p)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.setActive(p)
	if !admissionPolicy(p) {
		m.releaseAllParked() // admission no longer decides: nobody waits
	}
	m.mu.Unlock()
	return nil
}

// Done ends a request (response end, or either side closed): in-flight -1.
// Call it exactly once per successful Place (after Retry, with the Retry
// result).
func (m *Model) Done(p Placement, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight > 0 {
		m.inFlight--
	}
	if p.Replica >= 0 && p.Replica < len(m.reps) {
		m.reps[p.Replica].release(p.awaitingBody)
	}
	if p.SessionHash != 0 {
		m.sessions.touchHash(p.SessionHash, now.UnixNano())
	}
	m.peerDone(p, now)
}

// release takes one request off the replica's counts.
func (r *replica) release(awaitingBody bool) {
	if awaitingBody && r.awaitingBody > 0 {
		r.awaitingBody--
	} else if !awaitingBody && r.inFlight > 0 {
		r.inFlight--
	}
}

// BodyArrived says that the request's body has arrived whole (Request.
// BodyPending): from now on it steers placement like any other request.
func (m *Model) BodyArrived(p *Placement) {
	if !p.awaitingBody {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p.awaitingBody = false
	if p.Replica >= 0 && p.Replica < len(m.reps) {
		r := &m.reps[p.Replica]
		if r.awaitingBody > 0 {
			r.awaitingBody--
		}
		r.inFlight++
	}
}

// ObserveReplica feeds replica i's metrics. s.Healthy false marks it
// unhealthy and keeps the previous numbers.
func (m *Model) ObserveReplica(i int, s ReplicaMetrics, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= len(m.reps) {
		return
	}
	r := &m.reps[i]
	r.up = s.Healthy
	r.healthy = r.up && !r.draining
	if !s.Healthy {
		return
	}
	r.reason = ""
	r.metrics = s
	r.observed = true
	r.observedAt = now
	// Keep the largest batch seen under saturation: a single snapshot taken
	// while one long prompt is being prefilled shows running=1, waiting=1,
	// and a threshold of 1 would spill every turn of every session.
	if s.Waiting > 0 && s.Running > r.saturatedRunning {
		r.saturatedRunning = s.Running
	}
	r.hitRate.add(now, s.PrefixQueries, s.PrefixHits)
	for _, o := range m.observers {
		o.observe(m, i, s, now)
	}
	m.peerObserve(i, s, now)
}

// ExpireIdle sweeps up to budget table slots (all when budget <= 0),
// removes the sessions idle for longer than the TTL and marks those quiet
// for ActiveWindow inactive. The Warden calls it on each
// poll tick so that idle sessions go even without traffic.
func (m *Model) ExpireIdle(now time.Time, budget int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if budget <= 0 {
		budget = len(m.sessions.slots) + m.sessions.len() // every slot, plus re-looks after removals
	}
	return m.sessions.sweep(now.UnixNano(), budget)
}

// Sessions lists live sessions (hashes only), newest first, at most limit
// (0: all).
func (m *Model) Sessions(now time.Time, limit int) []adminapi.SessionInfo {
	m.mu.Lock()
	out := m.sessions.snapshot(m.cfg.Name, now.UnixNano(), 0)
	m.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].LastSeen.After(out[b].LastSeen) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// LiveSessions is the number of sessions in the table (pinned; not all
// of them active).
func (m *Model) LiveSessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions.len()
}
