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

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configFile := fs.String("config", "", "configuration file (lmwarden.yaml); without it, --listen and --replica describe one model")
	listen := fs.String("listen", "", "frontend address clients connect to (overrides the only model's frontend)")
	admin := fs.String("admin", "", "admin API address (default "+config.DefaultAdmin+"; off disables it)")
	var replicas repeatedFlag
	fs.Var(&replicas, "replica", "replica base URL, e.g. http://127.0.0.1:8001 (repeat; overrides the only model's replicas)")
	datapath := fs.String("datapath", "", "auto, kernel, msg, skb or user (default: the config's, else auto)")
	pinDir := fs.String("pin-dir", maps.DefaultDir, "the kernel datapath's pinned state (a directory on bpffs)")
	policy := fs.String("policy", "", "placement policy for every model: "+servePolicyNames())
	tokenFile := fs.String("admin-token-file", "", "the admin token admin writes need (default: the config's admin_token_file, else "+agent.DefaultAdminTokenFile()+")")
	var logf logFlags
	logf.register(fs)
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish")
	responseTimeout := fs.Duration("response-timeout", 300*time.Second, "how long a replica may take to start answering (prefill) or pause a stream")
	accessLog := fs.String("access-log", "", "on or off: one info line a request, keyed hashes only (default: the config's access_log, else on)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := logf.logger()
	if err != nil {
		return err
	}
	hup := newReloader(log) // from now on SIGHUP reloads instead of killing (reload.go)

	cfg, err := serveConfig(*configFile, *listen, *admin, *datapath, *policy, replicas)
	if err != nil {
		return err
	}
	access, err := accessLogger(cfg, *accessLog, log)
	if err != nil {
		return err
	}
	nofile := raiseNoFile(log)
	dp, err := selectDatapath(cfg, *pinDir, log)
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

	var token string
	if cfg.Admin != "" {
		path := *tokenFile
		if path == "" {
			path = cfg.AdminTokenFile
		}
		if path == "" {
			path = agent.DefaultAdminTokenFile()
		}
		if token, err = agent.LoadAdminToken(path); err != nil {
			return err
		}
		cfg.AdminTokenFile = path
	}
	opts := agent.Options{Logger: log, DialContext: dp.pollDial(), Build: buildInfo(), Datapath: dp.info(), AdminToken: token}
	if dp.kern != nil {
		if err := dp.kern.hashKey(cfg); err != nil {
			return err
		}
		opts.Sink = dp.kern.sessionSink(cfg)
	}
	w, err := agent.NewWithOptions(cfg, opts)
	if err != nil {
		return err
	}
	if dp.kern != nil {
		if n, err := dp.kern.restoreSessions(w, time.Now()); err != nil {
			log.Warn("sessions of the previous warden not restored", "err", err)
		} else if n > 0 {
			log.Info("sessions restored from the pinned map", "sessions", n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var reload func() (*config.Config, error)
	if *configFile != "" {
		reload = func() (*config.Config, error) {
			return serveConfig(*configFile, *listen, *admin, *datapath, *policy, replicas)
		}
	}
	hup.start(ctx, w, reload)

	// Frontends first: a port that is taken fails the start before anything runs.
	upstreams := dp.upstreams()
	limits := connLimits(cfg, nofile, log)
	var shims []*l7.Shim
	serveErr := make(chan error, len(w.Models()))
	closeShims := func() {
		var wg sync.WaitGroup
		for _, s := range shims {
			wg.Go(func() {
				if err := s.Close(); err != nil {
					log.Warn("shutdown", "err", err)
				}
			})
		}
		wg.Wait()
	}
	for _, m := range w.Models() {
		ln, err := dp.listen(m.Frontend())
		if err != nil {
			closeShims()
			return fmt.Errorf("model %s: frontend %s: %w", m.Name(), m.Frontend(), err)
		}
		s := l7.NewShim(m, l7.Options{
			Datapath: dp.Datapath, Upstreams: upstreams, Logger: log,
			ShutdownTimeout: *shutdown, ResponseTimeout: *responseTimeout,
			BodyDeadline: cfg.BodyTimeout, Limits: limits, AccessLog: access,
		})
		shims = append(shims, s)
		go func() { serveErr <- s.Serve(ln) }()
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
	w.Registry().MustRegister(l7.NewCollector(shims...))
	w.Registry().MustRegister(dp.collectors()...)
	if err := w.Start(ctx); err != nil {
		closeShims()
		return err
	}
	if a := w.AdminAddr(); a != "" {
		log.Info("admin API", "addr", a, "token_file", cfg.AdminTokenFile)
	}
	// Every frontend listens and the admin API answers: ready for
	// systemd (Type=notify) and for /readyz (which also wants a polled,
	// healthy replica per model).
	w.SetServing(true)
	sdNotify(log, "READY=1", fmt.Sprintf("STATUS=serving %d model(s), datapath %s", len(shims), dp.info().Name))
	go sdWatchdog(ctx, w, log)

	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", *shutdown)
		err = nil
	case err = <-serveErr:
		log.Error("frontend failed", "err", err)
	}
	w.SetServing(false)
	sdNotify(log, "STOPPING=1", "STATUS=shutting down: requests in flight may finish")
	closeShims()
	if cerr := w.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
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
