package main

import (
	"flag"
	"fmt"

	"github.com/lmwarden/lmwarden/bench"
)

// The flags of a trace replay (`lmwarden bench --replay FILE`).
func (f *benchFlags) registerReplay(fs *flag.FlagSet) {
	fs.StringVar(&f.replay, "replay", "", "replay a request trace in the Mooncake format (one JSON request a line: timestamp ms, input_length, output_length, hash_ids) instead of generating sessions; docs/workload.md")
	fs.IntVar(&f.replayBlock, "replay-block", bench.DefaultReplayBlock, "--replay: tokens each hash id covers")
	fs.StringVar(&f.replaySpeed, "replay-speed", "1", "--replay: comma-separated speeds, one step each: 10 plays ten seconds of the trace a second")
	fs.DurationVar(&f.replayFrom, "replay-from", 0, "--replay: play the trace from this time (its own time, e.g. 10m)")
	fs.DurationVar(&f.replayUntil, "replay-until", 0, "--replay: play the trace until this time (0: its end)")
	fs.BoolVar(&f.sessionHeader, "session-header", true, "send X-Claude-Code-Session-Id (a replay: one id a conversation); =false sends no session header, as a client without one")
}

// replayPlan reads the trace and the replay's flags; a replay's steps are
// its speeds, so the flags that shape generated sessions are refused.
func (f *benchFlags) replayPlan() ([]bench.Step, *bench.ReplayConfig, error) {
	for _, name := range []string{"steps", "arrivals", "warmup", "workload", "max-context", "duration"} {
		if f.set[name] {
			return nil, nil, fmt.Errorf("--%s does not apply to --replay (the trace says what arrives when; --replay-speed, --replay-from and --replay-until choose how it is played): %w", name, errUsage)
		}
	}
	steps, err := bench.ParseReplaySpeeds(f.replaySpeed)
	if err != nil {
		return nil, nil, fmt.Errorf("--replay-speed: %v: %w", err, errUsage)
	}
	if f.replayBlock < 1 {
		return nil, nil, fmt.Errorf("--replay-block %d: want a positive number of tokens: %w", f.replayBlock, errUsage)
	}
	if f.replayFrom < 0 || f.replayUntil < 0 || (f.replayUntil > 0 && f.replayUntil <= f.replayFrom) {
		return nil, nil, fmt.Errorf("--replay-from %v --replay-until %v: want 0 <= from < until (until 0: the end): %w", f.replayFrom, f.replayUntil, errUsage)
	}
	t, err := bench.ReadTraceFile(f.replay, f.replayBlock)
	if err != nil {
		return nil, nil, fmt.Errorf("--replay: %v: %w", err, errUsage)
	}
	return steps, &bench.ReplayConfig{Trace: t, From: f.replayFrom, Until: f.replayUntil}, nil
}
