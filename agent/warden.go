package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Options are the Warden's run-time hooks that are not configuration.
type Options struct {
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// Sink returns the session mirror of one model (nil or a nil result: none).
	Sink func(mc config.ModelConfig) placement.SessionSink
	// OnScrape is called after every successful scrape, after the token
	// series has been fed (nil: nothing more).
	OnScrape ScrapeObserver
	// DialContext opens the poller's connections to the replicas (nil: a
	// plain dialer). The kernel datapath registers them, so that its
	// dispatch program never steers a poll into the warden's own shim.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Build is the running build (lmwarden_build_info, GET /api/v1/warden).
	Build adminapi.BuildInfo
	// Datapath is the datapath the shims run with (GET /api/v1/warden).
	Datapath adminapi.DatapathInfo
	// AdminToken is what admin writes must carry (serve reads it from
	// admin_token_file, LoadAdminToken); "": a random one, known to the
	// process only (AdminToken).
	AdminToken string
}

// Warden is the daemon's control plane: the models, the pollers that keep
// their replica metrics and health current, the idle-session sweeper, and
// the admin HTTP server (API, /metrics; "/" is left for the dashboard).
type Warden struct {
	cfg        *config.Config
	opts       Options
	log        *slog.Logger
	models     []*placement.Model
	byName     map[string]*placement.Model
	byFrontend map[string]*placement.Model
	series     *TokenSeries
	registry   *prometheus.Registry
	mux        *http.ServeMux
	client     *http.Client

	serving atomic.Bool // the frontends listen (readiness)
	// pageReads bounds the session pages read at once (admin_sessions.go).
	pageReads chan struct{}
	token     string // the admin token (admin_auth.go)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	srv     *http.Server
	adminLn net.Listener
}

// New builds the models of a validated config. It starts nothing.
func New(cfg *config.Config) (*Warden, error) { return NewWithOptions(cfg, Options{}) }

// NewWithOptions is New with hooks.
func NewWithOptions(cfg *config.Config, opts Options) (*Warden, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Warden{
		cfg:        cfg,
		opts:       opts,
		log:        opts.Logger,
		byName:     map[string]*placement.Model{},
		byFrontend: map[string]*placement.Model{},
		series:     NewTokenSeries(0),
		registry:   prometheus.NewRegistry(),
		mux:        http.NewServeMux(),
		pageReads:  make(chan struct{}, concurrentPageReads),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.token = opts.AdminToken; w.token == "" {
		w.token = newToken()
	}
	hasher := placement.NewSessionHasher(cfg.HashKey)
	for i, mc := range cfg.Models {
		var sink placement.SessionSink
		if opts.Sink != nil {
			sink = opts.Sink(mc)
		}
		m, err := placement.NewModel(mc, placement.ModelOptions{Hasher: &hasher, Sink: sink, Seed: uint64(i) + 1, HitRateWindow: cfg.HitRateWindow})
		if err != nil {
			return nil, err
		}
		name := mc.Name
		m.SetSeriesHooks(func(t placement.ResponseTiming, now time.Time) { w.series.ObserveResponse(name, t, now) },
			func(code int, now time.Time) { w.series.ObserveAnswered(name, code, now) })
		w.models = append(w.models, m)
		w.byName[mc.Name] = m
		w.byFrontend[mc.Frontend] = m
	}
	// The warden's own families, then the standard go_* and process_*
	// ones (memory, GC, goroutines, CPU seconds, open file descriptors).
	w.registry.MustRegister(NewCollector(w.models, opts.Build), w.readyGauge(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.client = &http.Client{
		Transport: &http.Transport{
			Proxy:               nil, // replicas are local: never through a proxy
			DialContext:         opts.DialContext,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
	}
	w.routes()
	return w, nil
}

// Config is the configuration the warden runs with.
func (w *Warden) Config() *config.Config { return w.cfg }

// Models lists the models in config order.
func (w *Warden) Models() []*placement.Model { return w.models }

// Model finds a model by name (nil if none).
func (w *Warden) Model(name string) *placement.Model { return w.byName[name] }

// ModelByFrontend finds the model whose frontend is addr. An exact match
// wins; else a frontend with an unspecified host (":8000", "0.0.0.0:8000",
// "[::]:8000") matches any addr with the same port.
func (w *Warden) ModelByFrontend(addr string) *placement.Model {
	if m, ok := w.byFrontend[addr]; ok {
		return m
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	for fe, m := range w.byFrontend {
		h, p, err := net.SplitHostPort(fe)
		if err == nil && p == port && (h == "" || h == "0.0.0.0" || h == "::") {
			return m
		}
	}
	return nil
}

// TokenSeries is the token time series the pollers feed (dashboard stats).
func (w *Warden) TokenSeries() *TokenSeries { return w.series }

// Registry is the Prometheus registry behind GET /metrics.
func (w *Warden) Registry() *prometheus.Registry { return w.registry }

// Start launches the pollers and the idle-session sweeper, and the admin
// server when the config has an admin address. It returns once the admin
// socket listens; everything stops on Close or when ctx ends.
func (w *Warden) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("agent: warden already started")
	}
	if w.cfg.Admin != "" {
		ln, err := net.Listen("tcp", w.cfg.Admin)
		if err != nil {
			return fmt.Errorf("admin %s: %w", w.cfg.Admin, err)
		}
		// A bounded number of admin connections, each with deadlines: a
		// local user who floods the admin port holds at most these.
		ln = limitListener(ln, maxAdminConns)
		w.adminLn = ln
		w.srv = &http.Server{Handler: w.guard(w.mux), ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(w.log.Handler(), slog.LevelDebug)}
		w.wg.Go(func() {
			if err := w.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				w.log.Error("admin server", "err", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.started = true
	observe := func(m *placement.Model, i int, s placement.ReplicaMetrics, now time.Time) {
		w.series.ObserveLoad(m.Name(), i, s.Running, s.Waiting, s.KVUsage, now)
		w.series.Observe(m.Name(), i, TokenCounters{
			PromptTokens: s.PromptTokens, PrefixQueries: s.PrefixQueries,
			PrefixHits: s.PrefixHits, GenerationTokens: s.GenerationTokens,
		}, now)
		if w.opts.OnScrape != nil {
			w.opts.OnScrape(m, i, s, now)
		}
	}
	for _, m := range w.models {
		for _, p := range newPollers(m, w.cfg, w.client, observe, w.log) {
			w.wg.Go(func() { p.run(ctx) })
		}
	}
	w.wg.Go(func() { w.sweep(ctx) })
	return nil
}

// sweepBudget table slots are examined per model per poll tick: the 256k
// slots of 100k sessions are swept in 32 ticks (8 s at 250 ms).
const sweepBudget = 8192

func (w *Warden) sweep(ctx context.Context) {
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, m := range w.models {
				m.ExpireIdle(now, sweepBudget)
			}
		}
	}
}

// AdminAddr is the address the admin server listens on ("" when it does
// not run); useful with port 0.
func (w *Warden) AdminAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.adminLn == nil {
		return ""
	}
	return w.adminLn.Addr().String()
}

// Close stops the pollers and the admin server and waits for them.
func (w *Warden) Close() error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	w.started = false
	w.cancel()
	var err error
	if w.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err = w.srv.Shutdown(ctx); err != nil {
			w.srv.Close() // connections still reading a request: closed now
		}
		cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
	w.client.CloseIdleConnections()
	return err
}
