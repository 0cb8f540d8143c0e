package picker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Defaults of the picker's settings (docs/multihost.md lists them).
const (
	DefaultPollInterval   = 250 * time.Millisecond
	DefaultPollTimeout    = time.Second
	DefaultUnhealthyAfter = 3
	DefaultFallbacks      = 2
	DefaultSessionSync    = 30 * time.Second
	// DefaultSpillThreshold is the requests in flight through the picker
	// at which a conversation's request spills to another host. A host
	// serves several replicas and its own warden spills between them;
	// leaving the host throws the conversation's cache away, so it takes
	// far more pressure than a replica's default of 8.
	DefaultSpillThreshold = 64
)

// Config is what the picker runs with (the flags of `lmwarden picker`).
type Config struct {
	// Hosts is the static host list; with Discover, the first answer of
	// the lookup replaces it.
	Hosts []Host
	// Model is the model's name on the hosts' wardens ("": each host
	// serves exactly one model, and that one is read).
	Model string
	// Policy places requests on hosts (default sticky); SessionHeaders,
	// SessionTTL, SpillThreshold and HashKey mean what they mean for a
	// warden's model (docs/config.md). HashKey must be the hosts' key for
	// the picker to learn the hosts' sessions (SessionSync).
	Policy         config.Policy
	SessionHeaders []string
	SessionTTL     time.Duration
	SpillThreshold config.SpillThreshold
	HashKey        []byte
	// PollInterval is how often each host warden's admin API is read,
	// PollTimeout bounds one read, and UnhealthyAfter failed reads in a
	// row take a host out until it answers again.
	PollInterval   time.Duration
	PollTimeout    time.Duration
	UnhealthyAfter int
	// Fallbacks is how many other hosts, least loaded first, follow the
	// chosen one in the endpoint list the gateway may retry down (0:
	// DefaultFallbacks; negative: none).
	Fallbacks int
	// ShedWaiting > 0 sheds (429) a request of a conversation that has not
	// started when every eligible host has at least this many requests
	// waiting per ready replica; 0 never sheds.
	ShedWaiting float64
	// SessionSync is how often each host's session list is read to learn
	// conversations the picker has not placed itself (after a restart, or
	// through another front tier); 0 turns it off.
	SessionSync time.Duration
	// ServedReport decides when the gateway is asked to send the response
	// head, which carries the endpoint that served
	// (x-gateway-destination-endpoint-served): ServedReportAuto (the
	// default) only when a fallback may have served, ServedReportAlways on
	// every request.
	ServedReport ServedReport
	Logger       *slog.Logger
}

// ServedReport is when the picker asks for the served endpoint.
type ServedReport string

const (
	// ServedReportAuto asks for the response head only when the endpoint
	// list has fallbacks and the pick's host is in doubt (its last poll
	// failed, or it has not answered one for two poll intervals): only
	// then can a fallback serve. Otherwise the answer to the request
	// headers turns the response head off for that request (ext_proc
	// mode_override, honoured by a gateway with allow_mode_override), one
	// round trip less before the first byte.
	ServedReportAuto ServedReport = "auto"
	// ServedReportAlways leaves the gateway's processing mode as it is:
	// every response head is sent and answered.
	ServedReportAlways ServedReport = "always"
)

// ParseServedReport reads the --served-report flag.
func ParseServedReport(s string) (ServedReport, error) {
	switch v := ServedReport(s); v {
	case "", ServedReportAuto:
		return ServedReportAuto, nil
	case ServedReportAlways:
		return v, nil
	}
	return "", fmt.Errorf("served report %q: want auto or always", s)
}

func (c *Config) setDefaults() {
	if c.Policy == "" {
		c.Policy = config.PolicySticky
	}
	if len(c.SessionHeaders) == 0 {
		c.SessionHeaders = append([]string(nil), config.DefaultSessionHeaders...)
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = config.DefaultSessionTTL
	}
	if !c.SpillThreshold.Auto && c.SpillThreshold.N <= 0 {
		c.SpillThreshold.N = DefaultSpillThreshold
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PollTimeout <= 0 {
		c.PollTimeout = DefaultPollTimeout
	}
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = DefaultUnhealthyAfter
	}
	switch {
	case c.Fallbacks == 0:
		c.Fallbacks = DefaultFallbacks
	case c.Fallbacks < 0:
		c.Fallbacks = 0
	}
	if c.ServedReport == "" {
		c.ServedReport = ServedReportAuto
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Errors a pick answers with: the ext_proc server turns them into the
// protocol's immediate responses (503 and 429).
var (
	ErrNoEndpoint = errors.New("no host is ready")
	ErrShed       = errors.New("every host is saturated: a new conversation is shed")
)

// Registry is the picker's state: the hosts, what their wardens last said,
// and the placement Model whose replicas they are. Picks read memory only;
// one goroutine per host polls its warden.
type Registry struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	hasher placement.SessionHasher
	stats  *counters

	mu    sync.RWMutex
	gen   uint64 // bumped when the host list changes
	model *placement.Model
	hosts []*hostState // index = the host's replica index in model
	byEP  map[string]int

	order atomic.Pointer[[]ranked] // ready hosts, least loaded first

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool

	readyMu   sync.Mutex
	ready     bool
	listeners []func(ready bool)
}

// ranked is a ready host in the fallback order, with what shedding weighs.
type ranked struct {
	host              int
	waitingPerReplica float64
}

// hostState is one host and what its last polls said.
type hostState struct {
	Host
	cancel context.CancelFunc

	mu       sync.Mutex
	healthy  bool // as the Model has it: taking placements
	down     bool // out after UnhealthyAfter failed polls
	downAt   time.Time
	failures int // failed polls in a row
	lastErr  string
	load     HostLoad
	polledAt time.Time
	polls    uint64
	failed   uint64
	syncedAt time.Time
	restored uint64
}

// NewRegistry builds the picker's state over cfg.Hosts. It polls nothing
// until Start; until a host's warden has answered once, the host takes no
// placements.
func NewRegistry(cfg Config) (*Registry, error) {
	cfg.setDefaults()
	r := &Registry{
		cfg:    cfg,
		log:    cfg.Logger,
		hasher: placement.NewSessionHasher(cfg.HashKey),
		stats:  &counters{},
		client: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // the hosts are reached directly, never through a proxy
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
		}},
	}
	empty := []ranked{}
	r.order.Store(&empty)
	if err := r.rebuild(cfg.Hosts); err != nil {
		return nil, err
	}
	return r, nil
}

// modelConfig is the Model over hosts: each host is a replica whose URL is
// its endpoint.
func (r *Registry) modelConfig(hosts []Host) config.ModelConfig {
	mc := config.DefaultConfig().Models[0]
	if r.cfg.Model != "" {
		mc.Name = r.cfg.Model
	}
	mc.Frontend = "0.0.0.0:0" // the picker has no frontend of its own: the gateway's listener is the front
	mc.Replicas = make([]string, len(hosts))
	for i, h := range hosts {
		mc.Replicas[i] = "http://" + h.Endpoint
	}
	mc.Affinity = true
	mc.Policy = r.cfg.Policy
	mc.SessionHeaders = r.cfg.SessionHeaders
	mc.SessionTTL = r.cfg.SessionTTL
	mc.SpillThreshold = r.cfg.SpillThreshold
	return mc
}

// SetHosts replaces the host list (discovery found a change). Hosts that
// stay keep their health, their load and their conversations; a host that
// left loses its conversations to the others at their next request; a new
// host takes placements from its first good poll.
func (r *Registry) SetHosts(hosts []Host) error {
	r.mu.RLock()
	same := len(hosts) == len(r.hosts)
	for i := 0; same && i < len(hosts); i++ {
		same = hosts[i] == r.hosts[i].Host
	}
	r.mu.RUnlock()
	if same {
		return nil
	}
	return r.rebuild(hosts)
}

func (r *Registry) rebuild(hosts []Host) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%w: no hosts", ErrBadHost)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := placement.NewModel(r.modelConfig(hosts), placement.ModelOptions{Hasher: &r.hasher, Seed: r.gen + 1})
	if err != nil {
		return err
	}
	now := time.Now()
	old := map[string]*hostState{}
	for _, hs := range r.hosts {
		old[hs.Endpoint] = hs
	}
	states := make([]*hostState, len(hosts))
	byEP := make(map[string]int, len(hosts))
	for i, h := range hosts {
		hs := old[h.Endpoint]
		if hs == nil || hs.Admin != h.Admin {
			hs = &hostState{Host: h}
		} else {
			delete(old, h.Endpoint)
		}
		states[i], byEP[h.Endpoint] = hs, i
		hs.mu.Lock()
		m.SetHealthy(i, false)
		if hs.healthy {
			m.ObserveReplica(i, hs.load.metrics(), hs.polledAt)
		}
		hs.mu.Unlock()
	}
	if r.model != nil {
		restored := 0
		for _, s := range r.model.Sessions(now, 0) {
			h, err := strconv.ParseUint(s.Hash, 16, 64)
			if err != nil || s.Replica < 0 || s.Replica >= len(r.hosts) {
				continue
			}
			if j, ok := byEP[r.hosts[s.Replica].Endpoint]; ok && m.RestoreSession(h, j, s.LastSeen, now) {
				restored++
			}
		}
		r.log.Info("host list changed", "hosts", len(hosts), "sessions_kept", restored)
	}
	for _, hs := range old { // hosts that left: stop polling them
		if hs.cancel != nil {
			hs.cancel()
		}
	}
	r.model, r.hosts, r.byEP = m, states, byEP
	r.gen++
	if r.started {
		for _, hs := range states {
			if hs.cancel == nil {
				r.startPolling(hs)
			}
		}
	}
	r.reorderLocked()
	return nil
}

// Start polls every host until ctx ends or Close.
func (r *Registry) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.started = true
	for _, hs := range r.hosts {
		r.startPolling(hs)
	}
}

// startPolling runs hs's poll loop; call with r.mu held.
func (r *Registry) startPolling(hs *hostState) {
	ctx, cancel := context.WithCancel(r.ctx)
	hs.cancel = cancel
	r.wg.Go(func() {
		t := time.NewTicker(r.cfg.PollInterval)
		defer t.Stop()
		for {
			r.pollOnce(ctx, hs)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Close stops the polls and waits for them.
func (r *Registry) Close() {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return
	}
	r.started = false
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
	r.client.CloseIdleConnections()
}

// pollOnce reads one host's warden and feeds the Model.
func (r *Registry) pollOnce(ctx context.Context, hs *hostState) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PollTimeout)
	l, err := pollHost(pctx, r.client, hs.Host, r.cfg.Model)
	cancel()
	if ctx.Err() != nil {
		return // stopping, or the host left: not a failure
	}
	now := time.Now()
	r.mu.RLock()
	m := r.model
	i, ok := r.byEP[hs.Endpoint]
	ok = ok && r.hosts[i] == hs
	r.mu.RUnlock()
	if !ok {
		return
	}
	hs.mu.Lock()
	hs.polls++
	syncDue := false
	if err != nil {
		hs.failed++
		hs.failures++
		hs.lastErr = err.Error()
		m.PollFailed(i, hs.lastErr)
		if hs.failures >= r.cfg.UnhealthyAfter && !hs.down {
			hs.down, hs.healthy, hs.downAt = true, false, now
			m.SetHealthy(i, false)
			r.log.Warn("host down", "host", hs.Endpoint, "admin", hs.Admin, "failed_polls", hs.failures, "err", err)
		}
	} else {
		was := hs.healthy
		hs.load, hs.polledAt, hs.lastErr = l, now, ""
		hs.failures, hs.down, hs.healthy = 0, false, l.Healthy()
		m.ObserveReplica(i, l.metrics(), now)
		switch {
		case hs.healthy && !was:
			r.log.Info("host up", "host", hs.Endpoint, "ready_replicas", l.Ready, "replicas", l.Replicas)
		case !hs.healthy && was:
			r.log.Warn("host not ready", "host", hs.Endpoint, "serving", l.Serving, "ready_replicas", l.Ready, "replicas", l.Replicas)
		}
		syncDue = hs.healthy && r.cfg.SessionSync > 0 && (hs.syncedAt.IsZero() || now.Sub(hs.syncedAt) >= r.cfg.SessionSync)
		if syncDue {
			hs.syncedAt = now
		}
	}
	hs.mu.Unlock()
	r.reorder()
	if syncDue {
		r.syncSessions(ctx, hs, m, i)
	}
}

// syncSessions learns the conversations host i's warden holds that the
// picker does not know (a restarted picker, another picker, another front
// tier): each stays on that host. It needs the hosts' session-hash key.
func (r *Registry) syncSessions(ctx context.Context, hs *hostState, m *placement.Model, i int) {
	sctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	list, err := hostSessions(sctx, r.client, hs.Host, r.cfg.Model)
	if err != nil {
		r.log.Debug("host sessions not read", "host", hs.Endpoint, "err", err)
		return
	}
	now := time.Now()
	n := uint64(0)
	for _, s := range list {
		h, err := strconv.ParseUint(s.Hash, 16, 64)
		if err == nil && m.RestoreSession(h, i, s.LastSeen, now) {
			n++
		}
	}
	hs.mu.Lock()
	hs.restored += n
	hs.mu.Unlock()
	if n > 0 {
		r.log.Info("sessions learned from a host", "host", hs.Endpoint, "sessions", n)
	}
}

// reorder recomputes the fallback order from the Model's loads.
func (r *Registry) reorder() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.reorderLocked()
}

// reorderLocked is reorder with r.mu held (read or write).
func (r *Registry) reorderLocked() {
	st := r.model.Status()
	type scored struct {
		ranked
		load float64
	}
	var s []scored
	for i, rep := range st.Replicas {
		if !rep.Healthy || rep.ObservedAt == nil {
			continue
		}
		hs := r.hosts[i]
		hs.mu.Lock()
		w := 0.0
		if hs.load.Ready > 0 {
			w = hs.load.Waiting / float64(hs.load.Ready)
		}
		hs.mu.Unlock()
		s = append(s, scored{ranked{i, w}, rep.Load})
	}
	slices.SortStableFunc(s, func(a, b scored) int {
		switch {
		case a.load < b.load:
			return -1
		case a.load > b.load:
			return 1
		}
		return 0
	})
	order := make([]ranked, len(s))
	for k := range s {
		order[k] = s[k].ranked
	}
	r.order.Store(&order)
	r.setReady(len(order) > 0)
}

func (r *Registry) setReady(ok bool) {
	r.readyMu.Lock()
	changed := ok != r.ready
	r.ready = ok
	ls := r.listeners
	r.readyMu.Unlock()
	if changed {
		for _, f := range ls {
			f(ok)
		}
	}
}

// Ready says whether at least one host takes placements.
func (r *Registry) Ready() bool {
	r.readyMu.Lock()
	defer r.readyMu.Unlock()
	return r.ready
}

// OnReady registers f to be told every change of Ready (and once now).
func (r *Registry) OnReady(f func(ready bool)) {
	r.readyMu.Lock()
	r.listeners = append(r.listeners, f)
	ok := r.ready
	r.readyMu.Unlock()
	f(ok)
}

// Request is what the gateway told the picker about one HTTP request.
type Request struct {
	// SessionID is the first configured session header's value ("": none);
	// it is hashed with the key and never kept.
	SessionID string
	// PromptBytes is the request's Content-Length (0: unknown).
	PromptBytes int64
	// Subset, when HasSubset, is the endpoints the gateway allows for this
	// request (x-gateway-destination-endpoint-subset).
	Subset    []string
	HasSubset bool
	Now       time.Time
}

// Pick is the answer: the endpoints in the order the gateway should try
// them. Hand it back to Served (optional) and Done (exactly once).
type Pick struct {
	Endpoints []string
	Host      int // index of Endpoints[0] in Hosts()
	Kind      placement.PlacementKind
	// ReportServed says the endpoint that serves may not be the pick (a
	// fallback is listed and the pick's host is in doubt, or the Config
	// asks always): the gateway should report it on the response head.
	ReportServed bool
	model        *placement.Model
	gen          uint64
	placement    placement.Placement
	done         atomic.Bool
}

// Pick places one request: the Model over the hosts chooses (the session's
// host, or for a new one the host with the most room), then up to
// Fallbacks other ready hosts follow, least loaded first. It never waits
// on a host: every number it reads is in memory.
func (r *Registry) Pick(q Request) (*Pick, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.model
	order := *r.order.Load()
	allowed := func(int) bool { return true }
	if q.HasSubset {
		set := make(map[int]bool, len(q.Subset))
		for _, ep := range q.Subset {
			if i, ok := r.byEP[normalEndpoint(ep)]; ok {
				set[i] = true
			}
		}
		allowed = func(i int) bool { return set[i] }
		if len(set) == 0 {
			r.stats.noEndpoint.Add(1)
			return nil, fmt.Errorf("%w: none of the %d endpoints of the subset is a host of this picker", ErrNoEndpoint, len(q.Subset))
		}
	}
	if r.cfg.ShedWaiting > 0 && r.saturated(order, allowed) && !m.KnownSession(q.SessionID, q.Now) {
		r.stats.shed.Add(1)
		return nil, ErrShed
	}
	p, err := m.Place(placement.Request{SessionID: q.SessionID, PromptBytes: q.PromptBytes, Now: q.Now})
	if err != nil {
		r.stats.noEndpoint.Add(1)
		return nil, fmt.Errorf("%w: %v", ErrNoEndpoint, err)
	}
	if !allowed(p.Replica) {
		// The data plane allows other hosts for this request: the least
		// loaded of them serves it, the conversation stays where it was.
		m.Done(p, q.Now)
		j := -1
		for _, o := range order {
			if allowed(o.host) {
				j = o.host
				break
			}
		}
		if j < 0 {
			r.stats.noEndpoint.Add(1)
			return nil, fmt.Errorf("%w: no host of the subset is ready", ErrNoEndpoint)
		}
		if p, err = m.Place(placement.Request{SessionID: q.SessionID, PinnedHeader: strconv.Itoa(j), PromptBytes: q.PromptBytes, Now: q.Now}); err != nil || p.Replica != j {
			if err == nil {
				m.Done(p, q.Now)
			}
			r.stats.noEndpoint.Add(1)
			return nil, fmt.Errorf("%w: host %s of the subset is not ready", ErrNoEndpoint, r.hosts[j].Endpoint)
		}
	}
	eps := make([]string, 1, 1+min(r.cfg.Fallbacks, len(order)))
	eps[0] = r.hosts[p.Replica].Endpoint
	for _, o := range order {
		if len(eps) > r.cfg.Fallbacks {
			break
		}
		if o.host != p.Replica && allowed(o.host) {
			eps = append(eps, r.hosts[o.host].Endpoint)
		}
	}
	r.stats.picked.Add(1)
	report := r.cfg.ServedReport == ServedReportAlways || (len(eps) > 1 && r.inDoubt(r.hosts[p.Replica], q.Now))
	return &Pick{Endpoints: eps, Host: p.Replica, Kind: p.Kind, ReportServed: report, model: m, gen: r.gen, placement: p}, nil
}

// inDoubt says a host may refuse the request: its last poll failed, or
// none has succeeded for two poll intervals (a poll that hangs on a host
// gone from the network fails only after PollTimeout). A host that has
// just answered its poll takes the connection; the rare one that dies
// between two polls sends its requests down the fallback list unreported
// until its first failed poll (one poll interval), and its conversations
// are placed again, on the least loaded host (where the first fallback
// was), once it is seen down.
func (r *Registry) inDoubt(hs *hostState, now time.Time) bool {
	if now.IsZero() {
		now = time.Now()
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.failures > 0 || now.Sub(hs.polledAt) > 2*r.cfg.PollInterval
}

// saturated says whether every eligible ready host has ShedWaiting
// requests waiting per ready replica.
func (r *Registry) saturated(order []ranked, allowed func(int) bool) bool {
	any := false
	for _, o := range order {
		if !allowed(o.host) {
			continue
		}
		if o.waitingPerReplica < r.cfg.ShedWaiting {
			return false
		}
		any = true
	}
	return any
}

// Served tells the picker which endpoint the gateway's request actually
// went to (x-gateway-destination-endpoint-served). When it is not the one
// picked first, the request and the conversation move to that host.
func (r *Registry) Served(p *Pick, endpoint string) {
	if p == nil || p.done.Load() || endpoint == "" {
		return
	}
	r.mu.RLock()
	i, ok := r.byEP[normalEndpoint(endpoint)]
	same := p.gen == r.gen
	r.mu.RUnlock()
	if !ok || !same {
		if !ok {
			r.stats.servedUnknown.Add(1)
		}
		return
	}
	if i == p.Host {
		return
	}
	r.stats.servedFallback.Add(1)
	p.placement = p.model.Served(p.placement, i)
	p.Host = i
}

// Done ends the request (its stream ended). Safe to call more than once:
// only the first counts.
func (r *Registry) Done(p *Pick) {
	if p == nil || p.done.Swap(true) {
		return
	}
	p.model.Done(p.placement, time.Now())
}

// Model is the placement Model over the current hosts (admin API, tests).
func (r *Registry) Model() *placement.Model {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.model
}

// Config is the configuration with its defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

// HostStatus is one host as GET /api/v1/hosts shows it.
type HostStatus struct {
	Index    int    `json:"index"`
	Endpoint string `json:"endpoint"`
	Admin    string `json:"admin"`
	// Healthy: the host takes placements (its warden answered and is
	// ready with a ready replica). Down: it missed UnhealthyAfter polls
	// in a row.
	Healthy   bool       `json:"healthy"`
	Down      bool       `json:"down"`
	DownSince *time.Time `json:"down_since,omitempty"`
	Failures  int        `json:"failed_polls_in_a_row"`
	LastErr   string     `json:"last_error,omitempty"`
	PolledAt  *time.Time `json:"polled_at,omitempty"`
	Polls     uint64     `json:"polls"`
	Failed    uint64     `json:"failed_polls"`
	// SessionsLearned counts conversations learned from this host's
	// session list (SessionSync).
	SessionsLearned uint64   `json:"sessions_learned"`
	Load            HostLoad `json:"load"`
}

// Hosts snapshots every host.
func (r *Registry) Hosts() []HostStatus {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hostsLocked()
}

// snapshot is the hosts and the Model's status, of one host list.
func (r *Registry) snapshot() ([]HostStatus, adminapi.ModelStatus) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hostsLocked(), r.model.Status()
}

func (r *Registry) hostsLocked() []HostStatus {
	out := make([]HostStatus, len(r.hosts))
	for i, hs := range r.hosts {
		hs.mu.Lock()
		out[i] = HostStatus{
			Index: i, Endpoint: hs.Endpoint, Admin: hs.Admin, Healthy: hs.healthy, Down: hs.down,
			Failures: hs.failures, LastErr: hs.lastErr, Polls: hs.polls, Failed: hs.failed,
			SessionsLearned: hs.restored, Load: hs.load,
		}
		if !hs.polledAt.IsZero() {
			t := hs.polledAt
			out[i].PolledAt = &t
		}
		if hs.down {
			t := hs.downAt
			out[i].DownSince = &t
		}
		hs.mu.Unlock()
	}
	return out
}
