package picker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// ServerConfig is a whole picker process: the registry's settings and the
// addresses it serves.
type ServerConfig struct {
	Config
	// GRPC is the ext_proc (and gRPC health) listen address, e.g.
	// "0.0.0.0:9002"; "" serves none.
	GRPC string
	// Admin is the HTTP admin listen address; "" serves none.
	Admin string
	// SPOE is the HAProxy SPOE agent's listen address; "" serves none.
	SPOE string
	// Namespaces are the metadata namespaces (defaults: the protocol's).
	Namespaces Namespaces
	// Discover finds the hosts by DNS (discover.go); nil: Hosts as given.
	Discover *Discovery
	Build    adminapi.BuildInfo
}

// Server runs a picker: the registry's polls, the ext_proc gRPC server
// with the health service, the admin API, and the SPOE agent.
type Server struct {
	cfg      ServerConfig
	reg      *Registry
	ext      *ExtProc
	health   *health.Server
	grpc     *grpc.Server
	spoe     *SPOEAgent
	admin    *http.Server
	registry *prometheus.Registry
	serving  atomic.Bool

	mu                         sync.Mutex
	grpcLn, adminLn, spoeLn    net.Listener
	cancel                     context.CancelFunc
	wg                         sync.WaitGroup
	started, closed            bool
	grpcAddr, adminAddr, spAdr string
}

// NewServer builds a picker; Start runs it.
func NewServer(cfg ServerConfig) (*Server, error) {
	hosts := cfg.Hosts
	if len(hosts) == 0 && cfg.Discover != nil {
		// The first lookup decides the initial list; Start keeps it fresh.
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Discover.timeout())
		found, err := cfg.Discover.Lookup(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
		hosts = found
	}
	cfg.Hosts = hosts
	reg, err := NewRegistry(cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, reg: reg, registry: prometheus.NewRegistry()}
	s.ext = NewExtProc(reg, cfg.Namespaces, reg.log)
	s.health = NewHealth(reg)
	s.registry.MustRegister(NewCollector(reg, cfg.Build), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.grpc = grpc.NewServer(
		// Envoy keeps its ext_proc connection open and may ping it; a
		// ping more often than this is not abuse.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Fixed flow-control windows turn off gRPC's bandwidth-delay
		// probing, a PING for every burst of data: ext_proc messages are
		// small, and each extra frame is a write on the pick's path.
		grpc.InitialWindowSize(1<<20),
		grpc.InitialConnWindowSize(8<<20),
		// Streams are served by a pool of goroutines rather than one new
		// goroutine each (one stream per HTTP request).
		grpc.NumStreamWorkers(uint32(max(2, runtime.GOMAXPROCS(0)))),
	)
	extprocv3.RegisterExternalProcessorServer(s.grpc, s.ext)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.spoe = NewSPOEAgent(reg, reg.log)
	return s, nil
}

// Registry is the picker's state.
func (s *Server) Registry() *Registry { return s.reg }

// Start listens on every configured address and starts the polls; it
// returns once every socket listens.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("picker: already started")
	}
	listen := func(what, addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, addr, err)
		}
		return ln, nil
	}
	var err error
	if s.grpcLn, err = listen("grpc", s.cfg.GRPC); err != nil {
		return err
	}
	if s.adminLn, err = listen("admin", s.cfg.Admin); err != nil {
		s.closeListeners()
		return err
	}
	if s.spoeLn, err = listen("spoe", s.cfg.SPOE); err != nil {
		s.closeListeners()
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.started = true
	s.reg.Start(ctx)
	if s.cfg.Discover != nil {
		s.wg.Go(func() { s.cfg.Discover.run(ctx, s.reg) })
	}
	if s.grpcLn != nil {
		s.grpcAddr = s.grpcLn.Addr().String()
		ln := s.grpcLn
		s.serving.Store(true)
		s.wg.Go(func() {
			if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.reg.log.Error("grpc server", "err", err)
			}
		})
	}
	if s.adminLn != nil {
		s.adminAddr = s.adminLn.Addr().String()
		s.admin = &http.Server{Handler: adminHandler(s.reg, s.registry, s.serving.Load), ReadHeaderTimeout: 10 * time.Second}
		ln := s.adminLn
		s.wg.Go(func() {
			if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.reg.log.Error("admin server", "err", err)
			}
		})
	}
	if s.spoeLn != nil {
		s.spAdr = s.spoeLn.Addr().String()
		ln := s.spoeLn
		s.wg.Go(func() { s.spoe.Serve(ctx, ln) })
	}
	return nil
}

func (s *Server) closeListeners() {
	for _, ln := range []net.Listener{s.grpcLn, s.adminLn, s.spoeLn} {
		if ln != nil {
			ln.Close()
		}
	}
}

// GRPCAddr, AdminAddr and SPOEAddr are the addresses listened on ("" for
// one not served); useful with port 0.
func (s *Server) GRPCAddr() string  { s.mu.Lock(); defer s.mu.Unlock(); return s.grpcAddr }
func (s *Server) AdminAddr() string { s.mu.Lock(); defer s.mu.Unlock(); return s.adminAddr }
func (s *Server) SPOEAddr() string  { s.mu.Lock(); defer s.mu.Unlock(); return s.spAdr }

// Shutdown stops taking streams and lets the open ones finish within
// ctx: readiness goes NOT_SERVING first, so a gateway that health-checks
// the picker stops opening streams to it; then everything stops.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.serving.Store(false)
	s.health.Shutdown() // every service NOT_SERVING from now on
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		err = ctx.Err()
	}
	if s.admin != nil {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.admin.Shutdown(actx)
		cancel()
	}
	s.cancel() // also closes the SPOE listener and ends its sweeper
	s.spoe.Close()
	s.reg.Close()
	s.wg.Wait()
	return err
}

// Close is Shutdown with two seconds for the open streams.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}
