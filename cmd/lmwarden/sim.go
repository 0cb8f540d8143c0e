package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
	"github.com/lmwarden/lmwarden/sim"
)

// simStdout is where `lmwarden sim` prints (tests swap it).
var simStdout io.Writer = os.Stdout

func init() {
	register("sim", "run simulated vLLM replicas (prefix cache, scheduler, vLLM metrics)", runSim)
}

func runSim(args []string) error {
	if len(args) > 0 && args[0] == "calibrate" {
		return runSimCalibrate(args[1:])
	}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	replicas := fs.Int("replicas", 4, "number of replicas (ports shape) or data-parallel ranks (ranks shape)")
	listen := fs.String("listen", "127.0.0.1:8100", "address; in the ports shape replica i listens on port+i")
	shape := fs.String("shape", sim.ShapePorts, "ports: one port per replica; ranks: one port, X-data-parallel-rank picks the rank")
	var pf profileFlags
	pf.register(fs)
	speed := fs.Float64("speed", 1, "modelled seconds per wall second (20: a 3-minute run takes 9 s)")
	model := fs.String("model", "qwen3-4b", "served model name (model_name label, /v1/models)")
	lbStats := fs.String("lb-stats", "", "ranks shape, no rank header: balancer stats fresh (100 ms), stale (1 s late) or none (a round robin per API server); default: the profile's")
	table := fs.Bool("print-calibration", false, "print the profile's calibration table (Markdown) and exit")
	replyTokens := fs.String("reply-tokens", sim.DefaultReplies.Lengths.String(), "natural length of a text reply in tokens: lognormal:MEDIAN:SIGMA, uniform:MIN:MAX or fixed:N (max_tokens still cuts it)")
	toolUse := fs.Float64("tool-use", sim.DefaultReplies.ToolUse, "share of replies that call one of the offered tools (0-1), when a request offers tools")
	details := fs.Bool("enable-prompt-tokens-details", true, "report prompt-cache hits in usage (cached_tokens, cache_read_input_tokens), as vLLM does with this flag; false answers as vLLM's default")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := pf.resolve()
	if err != nil {
		return err
	}
	if *table {
		fmt.Fprint(simStdout, sim.CalibrationTable(p))
		return nil
	}
	lb, err := vllmlb.ParseStatsMode(*lbStats)
	if err != nil {
		return fmt.Errorf("--lb-stats: %v: %w", err, errUsage)
	}
	if *lbStats == "" {
		lb = p.LBStats()
	}
	if *shape != sim.ShapePorts && *shape != sim.ShapeRanks {
		return fmt.Errorf("--shape %q: want ports or ranks: %w", *shape, errUsage)
	}
	if *replicas < 1 || *speed <= 0 {
		return fmt.Errorf("--replicas must be >= 1 and --speed > 0: %w", errUsage)
	}
	lengths, err := sim.ParseLengthDist(*replyTokens)
	if err != nil {
		return fmt.Errorf("--reply-tokens: %v: %w", err, errUsage)
	}
	replies := sim.ReplyModel{Lengths: lengths, ToolUse: *toolUse}
	if err := replies.Check(); err != nil {
		return fmt.Errorf("--tool-use: %v: %w", err, errUsage)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := sim.Serve(ctx, sim.ServerConfig{
		Replicas: *replicas, Listen: *listen, Shape: *shape, Profile: p,
		Speed: *speed, Model: *model, LBStats: lb, Replies: replies, NoPromptTokensDetails: !*details,
	})
	if err != nil {
		return err
	}
	urls := srv.URLs()
	if *shape == sim.ShapeRanks {
		for i := range *replicas {
			fmt.Fprintf(simStdout, "rank %d: %s (X-data-parallel-rank: %d)\n", i, urls[0], i)
		}
	} else {
		for i, u := range urls {
			fmt.Fprintf(simStdout, "replica %d: %s\n", i, u)
		}
	}
	<-ctx.Done()
	return srv.Close()
}
