package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
)

func init() {
	register("serve", "run the warden: frontends, placement, metrics poller, admin API", runServe)
}

// serveFlags are serve's command line.
type serveFlags struct {
	configFile, listen, admin, datapath, pinDir, policy, tokenFile string
	accessLog                                                      string // on, off or "" (the config's)
	replicas                                                       repeatedFlag
	log                                                            logFlags
	shutdown, responseTimeout                                      time.Duration
}

func parseServeFlags(args []string) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&f.configFile, "config", "", "configuration file (lmwarden.yaml); without it, --listen and --replica describe one model")
	fs.StringVar(&f.listen, "listen", "", "frontend address clients connect to (overrides the only model's frontend)")
	fs.StringVar(&f.admin, "admin", "", "admin API address (default "+config.DefaultAdmin+"; off disables it)")
	fs.Var(&f.replicas, "replica", "replica base URL, e.g. http://127.0.0.1:8001 (repeat; overrides the only model's replicas)")
	fs.StringVar(&f.datapath, "datapath", "", "auto, kernel, msg, skb or user (default: the config's, else auto)")
	fs.StringVar(&f.pinDir, "pin-dir", maps.DefaultDir, "the kernel datapath's pinned state (a directory on bpffs)")
	fs.StringVar(&f.policy, "policy", "", "placement policy for every model: "+servePolicyNames())
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "the admin token admin writes need (default: the config's admin_token_file, else "+agent.DefaultAdminTokenFile()+")")
	f.log.register(fs)
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish")
	fs.DurationVar(&f.responseTimeout, "response-timeout", 300*time.Second, "how long a replica may take to start answering (prefill) or pause a stream")
	fs.StringVar(&f.accessLog, "access-log", "", "on or off: one info line a request, keyed hashes only (default: the config's access_log, else on)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return f, nil
}

// config loads the configuration the flags name, with their overrides.
func (f *serveFlags) config() (*config.Config, error) {
	return serveConfig(f.configFile, f.listen, f.admin, f.datapath, f.policy, f.replicas)
}

func runServe(args []string) error {
	flags, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	log, err := flags.log.logger()
	if err != nil {
		return err
	}
	hup := newReloader(log) // from now on SIGHUP reloads instead of killing (reload.go)

	cfg, err := flags.config()
	if err != nil {
		return err
	}
	access, err := accessLogger(cfg, flags.accessLog, log)
	if err != nil {
		return err
	}
	nofile := raiseNoFile(log)
	dp, err := selectDatapath(cfg, flags.pinDir, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := dp.Close(); err != nil {
			log.Warn("closing the datapath", "err", err)
		}
	}()
	if dp.kern == nil {
		// Only the kernel datapath can serve a frontend on a replica's
		// own {address, port}: it never steers the warden's own
		// connections. The shim listening there itself would be sent
		// its own requests.
		if err := checkNoLoop(cfg); err != nil {
			return err
		}
	} else if err := checkFrontendTakeover(cfg); err != nil {
		return err // frontend_takeover.go
	}
	w, err := newServeWarden(cfg, flags.tokenFile, dp, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var reload func() (*config.Config, error)
	if flags.configFile != "" {
		reload = flags.config
	}
	hup.start(ctx, w, reload)

	// Frontends first: a port that is taken fails the start before anything runs.
	fe, err := startFrontends(w, cfg, flags, dp, connLimits(cfg, nofile, log), access, log)
	if err != nil {
		return err
	}
	w.Registry().MustRegister(l7.NewCollector(fe.shims...))
	w.Registry().MustRegister(dp.collectors()...)
	if err := w.Start(ctx); err != nil {
		fe.close()
		return err
	}
	if a := w.AdminAddr(); a != "" {
		log.Info("admin API", "addr", a, "token_file", cfg.AdminTokenFile)
	}
	// Every frontend listens and the admin API answers: ready for
	// systemd (Type=notify) and for /readyz (which also wants a polled,
	// healthy replica per model).
	w.SetServing(true)
	sdNotify(log, "READY=1", fmt.Sprintf("STATUS=serving %d model(s), datapath %s", len(fe.shims), dp.info().Name))
	go sdWatchdog(ctx, w, log)

	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", flags.shutdown)
		err = nil
	case err = <-fe.failed:
		log.Error("frontend failed", "err", err)
	}
	w.SetServing(false)
	sdNotify(log, "STOPPING=1", "STATUS=shutting down: requests in flight may finish")
	fe.close()
	if cerr := w.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// newServeWarden loads the admin token, builds the warden over the
// datapath (with the kernel datapath: the session table mirrored into the
// pinned map, and the previous warden's sessions restored from it).
func newServeWarden(cfg *config.Config, tokenFile string, dp *servedDatapath, log *slog.Logger) (*agent.Warden, error) {
	var token string
	if cfg.Admin != "" {
		path := tokenFile
		if path == "" {
			path = cfg.AdminTokenFile
		}
		if path == "" {
			path = agent.DefaultAdminTokenFile()
		}
		var err error
		if token, err = agent.LoadAdminToken(path); err != nil {
			return nil, err
		}
		cfg.AdminTokenFile = path
	}
	opts := agent.Options{Logger: log, DialContext: dp.pollDial(), Build: buildInfo(), Datapath: dp.info(), AdminToken: token}
	if dp.kern != nil {
		if err := dp.kern.hashKey(cfg); err != nil {
			return nil, err
		}
		opts.Sink = dp.kern.sessionSink(cfg)
	}
	w, err := agent.NewWithOptions(cfg, opts)
	if err != nil {
		return nil, err
	}
	if dp.kern != nil {
		if n, err := dp.kern.restoreSessions(w, time.Now()); err != nil {
			log.Warn("sessions of the previous warden not restored", "err", err)
		} else if n > 0 {
			log.Info("sessions restored from the pinned map", "sessions", n)
		}
	}
	return w, nil
}

// frontends are the shims serving every model's frontend; failed receives
// the first error a shim's Serve returns.
type frontends struct {
	shims  []*l7.Shim
	failed chan error
	log    *slog.Logger
}

// close shuts every shim down at once, each within its shutdown timeout.
func (fe *frontends) close() {
	var wg sync.WaitGroup
	for _, s := range fe.shims {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				fe.log.Warn("shutdown", "err", err)
			}
		})
	}
	wg.Wait()
}

// startFrontends listens on every model's frontend and serves it with a
// shim; a frontend that cannot listen closes the ones already started.
func startFrontends(w *agent.Warden, cfg *config.Config, flags *serveFlags, dp *servedDatapath, limits *l7.ConnLimits, access, log *slog.Logger) (*frontends, error) {
	upstreams := dp.upstreams()
	fe := &frontends{failed: make(chan error, len(w.Models())), log: log}
	for _, m := range w.Models() {
		ln, err := dp.listen(m.Frontend())
		if err != nil {
			fe.close()
			return nil, fmt.Errorf("model %s: frontend %s: %w", m.Name(), m.Frontend(), err)
		}
		s := l7.NewShim(m, l7.Options{
			Datapath: dp.Datapath, Upstreams: upstreams, Logger: log,
			ShutdownTimeout: flags.shutdown, ResponseTimeout: flags.responseTimeout,
			BodyDeadline: cfg.BodyTimeout, Limits: limits, AccessLog: access,
		})
		fe.shims = append(fe.shims, s)
		go func() { fe.failed <- s.Serve(ln) }()
		// The address clients use; with the kernel datapath the shim's own
		// listener is an ephemeral loopback port the frontend is steered
		// to (ss shows no listener on the frontend itself).
		attrs := []any{"model", m.Name(), "frontend", m.Frontend()}
		switch {
		case strings.HasSuffix(m.Frontend(), ":0"):
			attrs[3] = ln.Addr().String() // the port the kernel gave
		case dp.kern != nil:
			attrs = append(attrs, "steered_to", ln.Addr().String())
		}
		log.Info("serving", append(attrs, "shape", shapeOf(m), "replicas", m.Replicas(), "policy", m.Config().Policy, "affinity", m.Affinity())...)
	}
	return fe, nil
}

// serveConfig loads the file (or builds a one-model config from flags) and
// applies the flag overrides.
func serveConfig(path, listen, admin, datapath, policy string, replicas []string) (*config.Config, error) {
	var cfg *config.Config
	if path != "" {
		c, err := config.LoadConfig(path)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		if listen == "" || len(replicas) == 0 {
			return nil, fmt.Errorf("without --config, give --listen and at least one --replica: %w", errUsage)
		}
		cfg = config.DefaultConfig()
	}
	if admin == "off" {
		cfg.Admin, admin = "", ""
	}
	if policy != "" {
		for i := range cfg.Models {
			cfg.Models[i].Policy = config.Policy(policy)
		}
	}
	if err := cfg.ApplyFlags(listen, admin, datapath, replicas); err != nil {
		return nil, err
	}
	return cfg, nil
}

// accessLogger is the access log's logger (nil: off): the daemon's own
// handler, so --log-format applies and --log-level above info silences it.
func accessLogger(cfg *config.Config, flag string, log *slog.Logger) (*slog.Logger, error) {
	on := cfg.AccessLogOn()
	switch flag {
	case "":
	case "on":
		on = true
	case "off":
		on = false
	default:
		return nil, fmt.Errorf("--access-log %q: want on or off: %w", flag, errUsage)
	}
	if !on {
		return nil, nil
	}
	return log, nil
}

func shapeOf(m *placement.Model) string {
	if m.OneEndpoint() {
		return "endpoint"
	}
	return "replicas"
}

func servePolicyNames() string {
	var names []string
	for _, p := range config.Policies() {
		names = append(names, string(p))
	}
	return strings.Join(names, ", ")
}
