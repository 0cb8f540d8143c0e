package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/lmwarden/lmwarden/maps"
)

func init() {
	register("unload", "detach the kernel data path, unpin its state, remove the frontend addresses it added", runUnload)
}

// runUnload removes what `serve --datapath kernel` left pinned. It refuses
// while a warden holds the state (stop it first).
func runUnload(args []string) error {
	fs := flag.NewFlagSet("unload", flag.ContinueOnError)
	dir := fs.String("dir", maps.DefaultDir, "pinned state directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return maps.Unload(maps.Options{Dir: *dir})
}
