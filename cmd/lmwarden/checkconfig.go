package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
)

func init() {
	register("check-config", "check a configuration file: every problem at once, each with its line and field", func(args []string) error {
		return runCheckConfig(args, os.Stdout)
	})
}

// errConfigProblems: the file was read and has problems (exit 1; they
// are printed already).
var errConfigProblems = errors.New("the configuration has problems")

// runCheckConfig loads FILE as serve would (defaults, unknown fields,
// every field's validation), prints every problem, one a line as
// FILE:LINE: field: what is wrong, and what the file describes when it is
// valid. Exit 0 valid, 1 problems (or unreadable), 2 usage.
func runCheckConfig(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: lmwarden check-config [--probe] FILE\n\nChecks FILE as `lmwarden serve --config FILE` would read it, without\nstarting anything. Exit status: 0 valid, 1 problems (each printed as\nFILE:LINE: field: message), 2 usage.\n")
		fs.PrintDefaults()
	}
	probe := fs.Bool("probe", false, "also poll every replica once as serve's poller would, and warn about each that would fail (unreachable, an HTTP error, a /metrics without vLLM's series)")
	// FILE is the one argument: parse the flags around it.
	var file string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%v: %w", err, errUsage)
		}
		if fs.NArg() == 0 {
			break
		}
		if file != "" {
			return fmt.Errorf("one FILE, got %q and %q: %w", file, fs.Arg(0), errUsage)
		}
		file, rest = fs.Arg(0), fs.Args()[1:]
	}
	if file == "" {
		return fmt.Errorf("give the configuration FILE to check: %w", errUsage)
	}
	cfg, err := config.LoadConfig(file)
	var ce *config.ConfigError
	switch {
	case errors.As(err, &ce):
		for _, p := range ce.Problems {
			fmt.Fprintln(out, problemLine(file, p))
		}
		fmt.Fprintf(out, "%s: %d problem(s)\n", file, len(ce.Problems))
		return errConfigProblems
	case err != nil:
		return err // unreadable: the file's own error
	}
	// What serve would refuse after the file itself: a frontend on a
	// replica's address with the userspace datapath.
	if err := checkNoLoop(cfg); err != nil {
		switch cfg.Datapath {
		case "user":
			fmt.Fprintf(out, "%s: %v\n%s: 1 problem(s)\n", file, err, file)
			return errConfigProblems
		case "auto":
			fmt.Fprintf(out, "%s: warning: serve refuses this layout if the kernel datapath cannot load (datapath auto falls back to user): %v\n", file, err)
		}
	}
	fmt.Fprintf(out, "%s: ok: datapath %s, admin %s, %d model(s)\n", file, cfg.Datapath, orOff(cfg.Admin), len(cfg.Models))
	for _, m := range cfg.Models {
		shape := fmt.Sprintf("%d replicas", len(m.Replicas))
		if m.OneEndpoint() {
			shape = fmt.Sprintf("endpoint %s, %d ranks", m.Endpoint, m.Ranks)
		}
		fmt.Fprintf(out, "  %s: frontend %s, %s, policy %s, affinity %v\n", m.Name, m.Frontend, shape, m.Policy, m.Affinity)
	}
	if *probe {
		probeReplicas(cfg, file, out)
	}
	return nil
}

// probeReplicas polls each replica (or endpoint) once and prints a
// warning for each that the poller would count as failed: the file is
// valid either way (a replica may start after the warden), so the exit
// status stays 0.
func probeReplicas(cfg *config.Config, file string, out io.Writer) {
	client := &http.Client{Timeout: cfg.PollTimeout}
	for i, m := range cfg.Models {
		urls, field := m.Replicas, "replicas[%d]"
		if m.OneEndpoint() {
			urls, field = []string{m.Endpoint}, "endpoint"
		}
		for j, u := range urls {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.PollTimeout)
			reason := agent.ProbeReplica(ctx, client, u)
			cancel()
			at := fmt.Sprintf("models[%d].", i) + strings.Replace(field, "%d", strconv.Itoa(j), 1)
			if reason != "" {
				fmt.Fprintf(out, "%s: %s: warning: %s: %s\n", file, at, u, reason)
			} else {
				fmt.Fprintf(out, "%s: %s: %s answers as vLLM\n", file, at, u)
			}
		}
	}
}

// problemLine is FILE:LINE: field: message (the compilers' form, which
// editors jump to).
func problemLine(file string, p config.FieldError) string {
	at := file
	if p.Line > 0 {
		at = fmt.Sprintf("%s:%d", file, p.Line)
	}
	if p.Path != "" {
		return at + ": " + p.Path + ": " + p.Msg
	}
	return at + ": " + p.Msg
}

func orOff(addr string) string {
	if addr == "" {
		return "off"
	}
	return addr
}
