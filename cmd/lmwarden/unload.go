package main

import (
	"flag"

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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return maps.Unload(maps.Options{Dir: *dir})
}
