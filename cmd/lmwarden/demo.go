package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/bench"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/sim"
)

func init() {
	register("demo", "one-command A/B: 4 simulated replicas, the warden in front, affinity off vs on", runDemo)
}

// demoFlags are the knobs of the demo; the defaults are the demo.
type demoFlags struct {
	replicas int
	profile  string
	over     profileFlags // vLLM settings over the profile
	speed    float64
	steps    string
	duration time.Duration
	api      string
	lbStats  string
	seed     uint64
	out      string
}

func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var f demoFlags
	fs.IntVar(&f.replicas, "replicas", 4, "simulated replicas")
	fs.StringVar(&f.profile, "profile", "a4000-qwen3-4b", "replica profile, or a profile file (YAML)")
	f.over.registerOverrides(fs)
	fs.Float64Var(&f.speed, "speed", 20, "replicas run this many times faster than the modelled hardware")
	fs.StringVar(&f.steps, "steps", "4,8,16", "concurrent sessions per step")
	fs.DurationVar(&f.duration, "duration", 3*time.Minute, "simulated length of each step and arm (wall time is this / --speed)")
	fs.StringVar(&f.api, "api", bench.APIAnthropic, "request shape: anthropic or openai")
	fs.StringVar(&f.lbStats, "lb-stats", "", "stats mode of vLLM's balancer in the off arm: fresh, stale or none (default: the profile's)")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fs.StringVar(&f.out, "out", "", "report directory (default out/demo-<time>)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	steps, err := parseSteps(f.steps)
	if err != nil {
		return err
	}
	f.over.name = f.profile
	p, err := f.over.resolve()
	if err != nil {
		return err
	}
	lb, err := vllmlb.ParseStatsMode(f.lbStats)
	if err != nil {
		return fmt.Errorf("--lb-stats: %v: %w", err, errUsage)
	}
	if f.lbStats == "" {
		lb = p.LBStats()
	}
	if f.replicas < 1 || f.speed <= 0 || f.duration <= 0 {
		return fmt.Errorf("--replicas, --speed and --duration must be positive: %w", errUsage)
	}
	if f.api != bench.APIAnthropic && f.api != bench.APIOpenAI {
		return fmt.Errorf("--api %q: want anthropic or openai: %w", f.api, errUsage)
	}
	out := f.out
	if out == "" {
		out = filepath.Join("out", "demo-"+time.Now().UTC().Format("20060102-150405"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo(ctx, os.Stdout, f, steps, p, lb, out)
}

// demo starts the replicas and the warden on 127.0.0.1 (free ports), runs
// the A/B through the warden and writes the report.
func demo(ctx context.Context, w io.Writer, f demoFlags, steps []int, p sim.Profile, lb vllmlb.StatsMode, out string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replicas, err := sim.Serve(ctx, sim.ServerConfig{
		Replicas: f.replicas, Listen: "127.0.0.1:0", Shape: sim.ShapePorts, Profile: p,
		Speed: f.speed, Model: "qwen3-4b", LBStats: lb,
	})
	if err != nil {
		return fmt.Errorf("simulated replicas: %w", err)
	}
	defer replicas.Close()

	front, err := startDemoWarden(ctx, w, replicas.URLs(), f.speed, lb)
	if err != nil {
		return err
	}
	defer front.Close()

	fmt.Fprintf(w, "LM Warden demo: %d simulated %s replicas at %gx speed (%s)\n", f.replicas, p.Name, f.speed, joinURLs(replicas.URLs()))
	fmt.Fprintf(w, "warden: frontend http://%s, admin http://%s, datapath %s\n", front.frontend, front.admin, front.datapath)
	fmt.Fprintf(w, "A/B: steps %v, %v of simulated time per step and arm (%v of wall time each), affinity off then on\n\n",
		steps, f.duration, time.Duration(float64(f.duration)/f.speed).Round(100*time.Millisecond))

	arms, err := bench.ParseArms("off,on")
	if err != nil {
		return err
	}
	rep, err := bench.RunReal(ctx, bench.RealConfig{
		Target: "http://" + front.frontend, API: f.api, Admin: "http://" + front.admin, AdminToken: front.warden.AdminToken(),
		Steps: bench.Sessions(steps...), Duration: f.duration, Arms: arms, Seed: f.seed, Speed: f.speed,
		Profile: p.Name, LBStats: lb.String(), Progress: bench.NewProgress(os.Stderr, len(steps)*2),
	})
	if err != nil {
		return err
	}
	return finishReport(w, rep, out)
}

// demoFront is the warden in front of the demo's replicas.
type demoFront struct {
	frontend, admin, datapath string
	warden                    *agent.Warden
	shim                      *l7.Shim
	dp                        *servedDatapath
}

// Close stops the warden, then releases the datapath; kernel state that
// the demo itself created is unloaded, so a demo leaves nothing pinned
// (state a running warden already had is left alone).
func (d *demoFront) Close() error {
	err := errors.Join(d.shim.Close(), d.warden.Close())
	created := d.dp.kern != nil && !d.dp.kern.st.Reused
	err = errors.Join(err, d.dp.Close())
	if created {
		err = errors.Join(err, maps.Unload(maps.Options{}))
	}
	return err
}

// startDemoWarden runs the same parts `lmwarden serve` runs (agent.Warden
// for placement, polling and the admin API; an l7.Shim on the frontend) in
// this process. Polling is scaled with the replicas' speed so that the
// warden sees load as often, in simulated time, as it would on real cards.
func startDemoWarden(ctx context.Context, out io.Writer, replicaURLs []string, speed float64, lb vllmlb.StatsMode) (*demoFront, error) {
	// The datapath as `lmwarden serve --datapath auto` chooses it: kernel
	// when privileged and built in, userspace otherwise; what it logs about
	// the choice becomes the demo's "datapath" line.
	var why reasonHandler
	dp, err := selectDatapath(&config.Config{Datapath: "auto"}, maps.DefaultDir, slog.New(&why))
	if err != nil {
		return nil, err
	}
	closeDatapath := dp.Close
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		closeDatapath()
		return nil, fmt.Errorf("frontend: %w", err)
	}
	cfg := config.DefaultConfig()
	cfg.Admin = "127.0.0.1:0"
	cfg.Datapath = dp.Name()
	cfg.PollInterval = max(20*time.Millisecond, time.Duration(float64(config.DefaultPollInterval)/speed))
	cfg.Models[0].Name = "qwen3-4b"
	cfg.Models[0].Frontend = ln.Addr().String()
	cfg.Models[0].Replicas = replicaURLs
	cfg.Models[0].VLLMLBStats = lb.String()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	wd, err := agent.NewWithOptions(cfg, agent.Options{Logger: quiet, DialContext: dp.pollDial()})
	if err != nil {
		ln.Close()
		closeDatapath()
		return nil, fmt.Errorf("warden: %w", err)
	}
	if err := wd.Start(ctx); err != nil {
		ln.Close()
		closeDatapath()
		return nil, fmt.Errorf("warden: %w", err)
	}
	shim := l7.NewShim(wd.Models()[0], l7.Options{Datapath: dp.Datapath, Upstreams: dp.upstreams(), Logger: quiet, ResponseTimeout: 300 * time.Second})
	go shim.Serve(ln)
	return &demoFront{
		frontend: ln.Addr().String(), admin: wd.AdminAddr(), warden: wd, shim: shim,
		dp: dp, datapath: dp.Name() + why.String(),
	}, nil
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ", "
		}
		s += u
	}
	return s
}

// reasonHandler keeps what selectDatapath logs, to print it as one line.
type reasonHandler struct{ lines []string }

func (h *reasonHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *reasonHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *reasonHandler) WithGroup(string) slog.Handler            { return h }
func (h *reasonHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" || a.Key == "err" {
			line = a.Value.String()
		}
		return true
	})
	h.lines = append(h.lines, line)
	return nil
}

// String is " (what was logged)", or "" when nothing was.
func (h *reasonHandler) String() string {
	if len(h.lines) == 0 {
		return ""
	}
	return " (" + strings.Join(h.lines, "; ") + ")"
}
