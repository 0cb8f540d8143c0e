package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// version and revision are set at build time (make build does, from git):
//
//	go build -ldflags "-X main.version=v0.3.0 -X main.revision=0123abcd" ./cmd/lmwarden
//
// Without them: the module version of a `go install`ed build, else
// "devel", and the revision the Go toolchain stamped (-buildvcs).
var version, revision string

func init() {
	register("version", "print the build: version, VCS revision, Go version", func(args []string) error {
		if err := parseFlags(flag.NewFlagSet("version", flag.ContinueOnError), args); err != nil {
			return err
		}
		fmt.Fprintln(os.Stdout, versionLine(buildInfo()))
		return nil
	})
}

// buildInfo reads the running binary's build: the ldflags version, then
// what the Go toolchain stamped into it (module version, vcs.revision,
// vcs.modified; `go build` inside a git checkout stamps them, `go run`
// and `go test` do not).
func buildInfo() adminapi.BuildInfo {
	b := adminapi.BuildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok && b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if ok && b.Revision == "" {
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && b.Revision != "" {
			b.Revision += "-dirty"
		}
	}
	return b
}

// versionLine is what --version prints: lmwarden VERSION (REVISION, GO OS/ARCH).
func versionLine(b adminapi.BuildInfo) string {
	rev := b.Revision
	if rev == "" {
		rev = "revision unknown"
	}
	return fmt.Sprintf("lmwarden %s (%s, %s %s/%s)", b.Version, rev, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
