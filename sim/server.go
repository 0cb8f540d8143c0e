package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// ServerConfig configures the real-mode simulator.
type ServerConfig struct {
	Replicas int
	Listen   string // host:port; in the ports shape replica i listens on port+i (port 0: any free port each)
	Shape    string // "ports" (default) or "ranks"
	Profile  Profile
	Speed    float64          // modelled seconds per wall second; 0 means 1
	Model    string           // served model name
	LBStats  vllmlb.StatsMode // ranks shape: how current the balancer's stats are
	// Replies is how the model answers (zero value: DefaultReplies).
	Replies ReplyModel
	// NoPromptTokensDetails answers as vLLM without
	// --enable-prompt-tokens-details: no cached_tokens in OpenAI usage, no
	// cache fields in Anthropic usage (whose input_tokens is then the whole
	// prompt). By default the simulator reports them, as vLLM with the flag.
	NoPromptTokensDetails bool
	// OnRequest, if set, is told about every answered request, on the
	// request's own goroutine (tests and tools read what each replica did).
	OnRequest func(RequestRecord)
}

// RequestRecord is what one answered request did on its replica. It holds
// no prompt text and no session id.
type RequestRecord struct {
	Replica      int
	API          string // "anthropic", "chat" or "completions"
	Model        string // as the request named it
	Stream       bool
	PromptTokens int
	CachedTokens int // the prefix-cache hit at first admission
	OutputTokens int
	StopReason   string // in the API's words: end_turn, tool_use, max_tokens, stop_sequence; stop, tool_calls, length
	ToolCall     string // the tool a finished call named, if any
	// Header is the request's header as the replica received it (what a
	// warden in front forwarded).
	Header http.Header
}

// Shapes of deployment (docs/architecture.md).
const (
	ShapePorts = "ports"
	ShapeRanks = "ranks"
)

// Servers is a running real-mode simulator: HTTP listeners over engines on a
// wall-paced clock.
type Servers struct {
	cfg      ServerConfig
	pacer    *pacer
	balancer *vllmlb.Balancer // ranks shape only
	servers  []*http.Server
	urls     []string
	nextID   atomic.Uint64
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

// Serve starts the simulator and returns once every listener is up. It
// serves until ctx ends or Close is called.
func Serve(ctx context.Context, cfg ServerConfig) (*Servers, error) {
	if cfg.Replicas < 1 {
		return nil, fmt.Errorf("sim: replicas must be at least 1, got %d", cfg.Replicas)
	}
	if cfg.Shape == "" {
		cfg.Shape = ShapePorts
	}
	if cfg.Shape != ShapePorts && cfg.Shape != ShapeRanks {
		return nil, fmt.Errorf("%w: %q (want ports or ranks)", ErrBadShape, cfg.Shape)
	}
	if cfg.Speed <= 0 {
		cfg.Speed = 1
	}
	if cfg.Profile.Name == "" {
		p, err := LookupProfile("a4000-qwen3-4b")
		if err != nil {
			return nil, err
		}
		cfg.Profile = p
	}
	if cfg.Model == "" {
		cfg.Model = "qwen3-4b"
	}
	if cfg.Replies == (ReplyModel{}) {
		cfg.Replies = DefaultReplies
	}
	if err := cfg.Replies.Check(); err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("sim: listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen port %q: %w", portStr, err)
	}

	s := &Servers{cfg: cfg, pacer: newPacer(NewVirtual(cfg.Profile, cfg.Replicas), cfg.Speed)}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // sockets may go into a sockmap
	listen := func(p int) (net.Listener, error) {
		return lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(p)))
	}

	var lns []net.Listener
	var handlers []http.Handler
	fail := func(err error) (*Servers, error) {
		for _, ln := range lns {
			ln.Close()
		}
		s.pacer.close()
		return nil, err
	}
	switch cfg.Shape {
	case ShapePorts:
		for i := range cfg.Replicas {
			p := port
			if port != 0 {
				p = port + i
			}
			ln, err := listen(p)
			if err != nil {
				return fail(fmt.Errorf("sim: replica %d: %w", i, err))
			}
			lns = append(lns, ln)
			reg := newReplicaRegistry(s.pacer, cfg.Model, cfg.Profile, []int{i}, []string{"0"})
			handlers = append(handlers, s.handler(i, reg))
		}
	case ShapeRanks:
		ln, err := listen(port)
		if err != nil {
			return fail(fmt.Errorf("sim: %w", err))
		}
		lns = append(lns, ln)
		all, labels := make([]int, cfg.Replicas), make([]string, cfg.Replicas)
		for i := range all {
			all[i], labels[i] = i, strconv.Itoa(i)
		}
		s.balancer = vllmlb.New(cfg.Replicas, cfg.LBStats, 1) // a fixed draw of API servers: runs repeat
		s.startCoordinator()
		handlers = append(handlers, s.handler(-1, newReplicaRegistry(s.pacer, cfg.Model, cfg.Profile, all, labels)))
	}
	for k, ln := range lns {
		srv := &http.Server{Handler: handlers[k], ReadHeaderTimeout: 10 * time.Second}
		s.servers = append(s.servers, srv)
		s.urls = append(s.urls, "http://"+ln.Addr().String())
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			srv.Serve(ln)
		}()
	}
	go func() {
		<-ctx.Done()
		s.Close()
	}()
	return s, nil
}

// URLs are the base URLs: one per replica (ports) or the one endpoint (ranks).
func (s *Servers) URLs() []string { return append([]string(nil), s.urls...) }

// Stats returns a replica's numbers (what its /metrics shows).
func (s *Servers) Stats(replica int) Stats {
	var st Stats
	s.pacer.read(func(v *Virtual) { st = v.Stats(replica) })
	return st
}

// Close stops the listeners, ends open streams and stops the clock.
func (s *Servers) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, srv := range s.servers {
		// streams end when their request contexts are cancelled by Close
		if err := srv.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	s.pacer.close()
	return errors.Join(errs...)
}

// startCoordinator publishes every rank's counts to the balancer on the
// modelled clock, as vLLM's DP coordinator does every 100 ms.
func (s *Servers) startCoordinator() {
	n := s.cfg.Replicas
	waiting, running := make([]int, n), make([]int, n)
	var publish func()
	publish = func() {
		v := s.pacer.v // called under the pacer lock
		for i := range n {
			st := v.engines[i]
			waiting[i], running[i] = len(st.waiting), len(st.running)
		}
		s.balancer.Observe(v.Now(), waiting, running)
		if s.cfg.LBStats != vllmlb.None {
			v.At(v.Now().Add(vllmlb.PublishInterval), publish)
		}
	}
	s.pacer.do(func(v *Virtual) { v.At(v.Now(), publish) })
}

// pickRank routes a ranks-shape request: the header's rank, else the
// balancer's choice (under the pacer lock, like every engine access).
func (s *Servers) pickRank(header string) (int, error) {
	if header != "" {
		r, err := strconv.Atoi(header)
		if err != nil || r < 0 || r >= s.cfg.Replicas {
			return 0, badRequest("X-data-parallel-rank: %q is not a rank in [0, %d)", header, s.cfg.Replicas)
		}
		return r, nil
	}
	var r int
	s.pacer.do(func(v *Virtual) { r = s.balancer.Pick(v.Now(), nil) })
	return r, nil
}
