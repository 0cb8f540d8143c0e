package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/lmwarden/lmwarden/bench"
)

func init() {
	register("bench-pool", "pool many seeds of bench --virtual --trace runs into one table with bootstrap intervals", runBenchPool)
}

func runBenchPool(args []string) error {
	fs := flag.NewFlagSet("bench-pool", flag.ContinueOnError)
	baseline := fs.String("baseline", "", "the group the others are divided by (default: the first group)")
	boot := fs.Int("boot", bench.DefaultPoolBoot, "bootstrap resamples of the seeds (fixed random source: the same runs give the same table)")
	out := fs.String("out", "", "write the table to this file as well as to stdout")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: lmwarden bench-pool [--baseline LABEL] [--boot N] [--out FILE.md] GROUP...\n"+
			"GROUP = [LABEL=]GLOB[:ARM]: the --out directories of `lmwarden bench --virtual --trace` runs GLOB matches,\n"+
			"one arm of them (without :ARM each arm is a group of its own); paired by report.json's seed.\n\n")
		fs.PrintDefaults()
	}
	groups, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		return fmt.Errorf("no GROUP given: %w", errUsage)
	}
	if *boot < 1 {
		return fmt.Errorf("--boot %d: want at least 1 resample: %w", *boot, errUsage)
	}
	var specs []bench.PoolSpec
	for _, g := range groups {
		s, err := bench.ParsePoolSpec(g)
		if err != nil {
			return fmt.Errorf("%v: %w", err, errUsage)
		}
		specs = append(specs, s)
	}
	pool, err := bench.ReadPool(specs)
	if err != nil {
		return err
	}
	var table strings.Builder
	if err := pool.WriteTable(&table, *baseline, *boot); err != nil {
		return err
	}
	if _, err := os.Stdout.WriteString(table.String()); err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	return os.WriteFile(*out, []byte(table.String()), 0o644)
}

// parseInterleaved parses flags given before, between or after the
// positional arguments (the groups) and returns those.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, fmt.Errorf("%v: %w", err, errUsage)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
