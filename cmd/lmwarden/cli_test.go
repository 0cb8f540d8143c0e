package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Every command answers -h and --help with its flags and exit status 0;
// a flag it does not know is a usage error (2).
func TestEveryCommandHelpExitsZero(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, h := range []string{"-h", "--help"} {
			if code := run([]string{n, h}); code != 0 {
				t.Errorf("lmwarden %s %s: exit %d, want 0", n, h, code)
			}
		}
		if code := run([]string{n, "--no-such-flag"}); code != 2 {
			t.Errorf("lmwarden %s --no-such-flag: exit %d, want 2", n, code)
		}
	}
	if code := run([]string{"-h"}); code != 0 {
		t.Errorf("lmwarden -h: exit %d", code)
	}
	if code := run(nil); code != 2 {
		t.Errorf("lmwarden without a command: exit %d, want 2", code)
	}
}

// The binary make builds names its version and the commit it was built
// from; one built without ldflags says devel.
func TestVersionNamesTheBuild(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(mustServeBinary(t), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if line := strings.TrimSpace(string(out)); !regexp.MustCompile(`^lmwarden \S+ \(\S.*, go1\.\d+\S* linux/\w+\)$`).MatchString(line) {
			t.Errorf("%v: %q", args, line)
		}
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if exec.Command("git", "rev-parse", "HEAD").Run() != nil {
		t.Skip("not a git checkout")
	}
	bin := filepath.Join(t.TempDir(), "lmwarden")
	if out, err := exec.Command("make", "-s", "-C", "../..", "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^lmwarden \S+ \([0-9a-f]{12}(-dirty)?, go1`).Match(out) {
		t.Errorf("make build: %q: want the commit", out)
	}
}
