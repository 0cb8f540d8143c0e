package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// simStderr is where `lmwarden sim calibrate` writes its progress line.
var simStderr io.Writer = os.Stderr

// runSimCalibrate is `lmwarden sim calibrate`: measure a running
// vLLM-compatible replica and write a profile file of it.
func runSimCalibrate(args []string) error {
	fs := flag.NewFlagSet("sim calibrate", flag.ContinueOnError)
	replica := fs.String("replica", "", "base URL of the replica to measure (required; it should be idle)")
	model := fs.String("model", "", "model field of the requests (default: the first of GET /v1/models)")
	rank := fs.Int("rank", -1, "with several ranks behind one URL, the rank to measure (X-data-parallel-rank and the engine label)")
	like := fs.String("like", "a4000-qwen3-4b", "profile (name or file) that supplies what cannot be measured: the model's shape, max_num_seqs, the vLLM behaviours")
	maxSeqs := fs.Int("max-num-seqs", 0, "the replica's max_num_seqs (default: the --like profile's)")
	name := fs.String("name", "calibrated", "the new profile's name")
	out := fs.String("out", "calibrated.yaml", "profile file to write (- for standard output)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%v: %w", err, errUsage)
	}
	if *replica == "" || fs.NArg() > 0 {
		return fmt.Errorf("sim calibrate needs --replica URL and no other arguments: %w", errUsage)
	}
	base, err := sim.LookupProfile(*like)
	if err != nil {
		return fmt.Errorf("--like: %v: %w", err, errUsage)
	}
	if *maxSeqs > 0 {
		base.MaxNumSeqs = *maxSeqs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	m, err := sim.Measure(ctx, sim.MeasureConfig{URL: *replica, Model: *model, Rank: *rank, Like: base,
		Progress: func(done, total int, what string) {
			fmt.Fprintf(simStderr, "\r\033[Kcalibrate: [%d/%d] %s", done, total, what)
		}})
	fmt.Fprintln(simStderr)
	if err != nil {
		return err
	}
	p := m.Profile
	p.Name = *name
	header := fmt.Sprintf("Written by `lmwarden sim calibrate --replica %s --like %s` in %s.\n", *replica, *like, time.Since(start).Round(time.Second)) +
		"Rates are effective ones (efficiencies 1); the model's shape, max_num_seqs and the vLLM\n" +
		"behaviours come from the --like profile. What was measured:\n" + strings.Join(m.Points, "\n")
	if m.ChunkAtLeast {
		header += fmt.Sprintf("\nmax_num_batched_tokens is at least %d: no prompt was long enough to tell more.", p.MaxNumBatchedTokens)
	}
	b, err := sim.WriteProfile(p, header)
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err = simStdout.Write(b)
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(simStdout, "wrote %s: KV %d tokens (blocks of %d), max_model_len %d, chunks of %d, compute %.2f TFLOP/s, memory %.0f GB/s, step overhead %v; use it with --profile %s\n",
		*out, p.KVTokens(), p.BlockSize, p.MaxModelLen, p.MaxNumBatchedTokens, p.PeakFLOPS/1e12, p.MemBytesPerSec/1e9, p.StepOverhead, *out)
	return nil
}
