package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// parseFlags parses a subcommand's flags the same way for every command:
// -h/--help is flag.ErrHelp as is (run exits 0 after the flag package has
// printed the flags), a bad flag or a stray argument is a usage error
// (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%v: %w", err, errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: %w", fs.Args(), errUsage)
	}
	return nil
}

// repeatedFlag collects a flag given several times (--replica).
type repeatedFlag []string

func (r *repeatedFlag) String() string { return strings.Join(*r, ",") }
func (r *repeatedFlag) Set(v string) error {
	*r = append(*r, v)
	return nil
}

// logFlags are --log-level and --log-format, for the commands that log.
type logFlags struct{ level, format string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "debug (one line a request), info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "text (key=value, as logfmt) or json (one object a line, for a log collector)")
}

// logger builds the slog logger the flags describe, writing to stderr
// (under systemd, the journal).
func (l *logFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error: %w", l.level, errUsage)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json: %w", l.format, errUsage)
}
