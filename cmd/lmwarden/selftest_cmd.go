package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/maps"
)

func init() {
	register("selftest", "prove a kernel datapath on this host's kernel (what serve's --datapath auto does at start)", runSelftest)
}

// runSelftest is `lmwarden selftest`: what serve does with --datapath
// before it serves (load each datapath the mode names, run the self-test
// over it, take the first that passes), alone, on state pinned in a
// temporary directory of bpffs that it removes, so a warden running on
// this host is left alone. An operator runs it on a host's kernel before
// deploying (docs/deploy.md); `make kernels` runs it in each VM. It
// prints the outcome of each datapath tried and, last, the one chosen
// and why; it exits 1 when the mode asked for a kernel datapath and none
// passed.
func runSelftest(args []string) error {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	mode := fs.String("datapath", "auto", "auto (msg, then skb, then user), kernel (msg, then skb), msg or skb")
	parent := fs.String("bpffs", "/sys/fs/bpf", "the bpffs directory the temporary state goes under")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if _, ok := datapathModes[*mode]; !ok || *mode == "user" {
		return fmt.Errorf("--datapath %q: want auto, kernel, msg or skb: %w", *mode, errUsage)
	}
	tmp, err := os.MkdirTemp(*parent, "lmwarden-selftest-")
	if err != nil {
		return fmt.Errorf("a temporary state directory on bpffs: %w", err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "state")
	defer maps.Unload(maps.Options{Dir: dir})
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dp, err := selectDatapath(&config.Config{Datapath: *mode}, dir, log)
	if err != nil {
		return err
	}
	defer dp.Close()
	name, reason := dp.current()
	fmt.Printf("%s: %s (%s)\n", *mode, name, reason)
	if *mode != "auto" && dp.kern == nil {
		return fmt.Errorf("--datapath %s: no kernel datapath passed", *mode)
	}
	return nil
}
