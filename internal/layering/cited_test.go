package layering

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// topDirs are the repository's top-level directories: a path in a doc or
// a code comment that starts with one of them cites a file or directory
// of the repository.
var topDirs = []string{"agent", "bench", "bpf", "cmd", "deploy", "docs", "faults", "internal", "kernel", "l7", "maps", "picker", "scripts", "sim"}

// citedPath finds a repository path: a top-level directory, then at least
// one more segment, not itself inside another path (so src/internal/... or
// a URL's path is not read as ours). Only a file (a name with an
// extension) or a directory written with its trailing slash counts:
// "the kernel/user ABI" is prose.
var citedPath = regexp.MustCompile(`(?:^|[^\w/.\-<>])((?:` + strings.Join(topDirs, "|") + `)/[\w.\-/*<>]*(?:\.[a-z]+\b|/))`)

// bareSource is a Go file named without its directory in a Go comment
// (skb.go): some file of the tree must have that name. (C names are
// left out: comments cite other projects' headers, such as SipHash's
// vectors.h, and ours are cited with their directory, bpf/lmwarden.h.)
var bareSource = regexp.MustCompile(`(?:^|[^\w/.\-<>*])([a-z][a-z0-9_]*\.go)\b`)

// placeholder is a <name> in a cited path, read as a glob.
var placeholder = regexp.MustCompile(`<[^<>/]*>`)

// TestCitedPathsExist fails on a repository path cited in a doc (*.md) or
// a Go comment that is not in the tree: a file moved or renamed must not
// leave a reader looking for it. Globs (policy_*.go) are checked by
// matching.
func TestCitedPathsExist(t *testing.T) {
	root := moduleRoot(t)
	tracked, names := map[string]bool{}, map[string]bool{}
	files := trackedText(t, root)
	for _, f := range gitFiles(t, root) {
		tracked[f], names[path.Base(f)] = true, true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			tracked[d] = true
		}
	}
	for _, f := range files {
		if f == "internal/layering/cited_test.go" {
			continue // its own examples
		}
		var texts []citedText
		switch filepath.Ext(f) {
		case ".md":
			texts = mdText(t, root, f)
		case ".go":
			texts = goComments(t, root, f)
		default:
			continue
		}
		for _, tx := range texts {
			for _, m := range citedPath.FindAllStringSubmatch(tx.text, -1) {
				p := strings.TrimSuffix(m[1], ".")
				if !citedExists(tracked, p) {
					t.Errorf("%s:%d cites %s, which is not in the repository", f, tx.line, p)
				}
			}
			if filepath.Ext(f) != ".go" {
				continue
			}
			for _, m := range bareSource.FindAllStringSubmatch(tx.text, -1) {
				if !names[m[1]] {
					t.Errorf("%s:%d cites %s, and no file of the repository has that name", f, tx.line, m[1])
				}
			}
		}
	}
}

// TestCitedPathFindsOnlyOurs pins what counts as a citation.
func TestCitedPathFindsOnlyOurs(t *testing.T) {
	text := "see l7/forward.go and (docs/kernel.md), `agent/placement/`, not src/internal/poll/fd.go, " +
		"github.com/x/kernel/y.go, the kernel/user ABI or vllm/v1/metrics/loggers.py; l7/policy_*.go, agent/policy_<name>.go."
	var got []string
	for _, m := range citedPath.FindAllStringSubmatch(text, -1) {
		got = append(got, strings.TrimSuffix(m[1], "."))
	}
	want := []string{"l7/forward.go", "docs/kernel.md", "agent/placement/", "l7/policy_*.go", "agent/policy_<name>.go"}
	if !slices.Equal(got, want) {
		t.Fatalf("citations %q, want %q", got, want)
	}
	got = nil
	for _, m := range bareSource.FindAllStringSubmatch("the pool (kernel_pool.go, skb.go), not l7/x.go, x_test.go's _test.go or vectors.h", -1) {
		got = append(got, m[1])
	}
	if want := []string{"kernel_pool.go", "skb.go", "x_test.go"}; !slices.Equal(got, want) {
		t.Fatalf("bare names %q, want %q", got, want)
	}
}

// citedExists reports whether p (a file or a directory, possibly a glob)
// is in the tree.
func citedExists(tracked map[string]bool, p string) bool {
	p = placeholder.ReplaceAllString(strings.TrimSuffix(p, "/"), "*")
	if !strings.Contains(p, "*") {
		return tracked[p]
	}
	for f := range tracked {
		if ok, _ := path.Match(p, f); ok {
			return true
		}
	}
	return false
}

// citedText is a piece of text to search and the line it starts on.
type citedText struct {
	text string
	line int
}

// mdText is a doc's lines.
func mdText(t *testing.T, root, f string) []citedText {
	b, err := os.ReadFile(filepath.Join(root, f))
	if err != nil {
		t.Fatal(err)
	}
	var out []citedText
	for i, l := range strings.Split(string(b), "\n") {
		out = append(out, citedText{l, i + 1})
	}
	return out
}

// goComments is a Go file's comments, a line each.
func goComments(t *testing.T, root, f string) []citedText {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, filepath.Join(root, f), nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	var out []citedText
	for _, g := range file.Comments {
		for _, c := range g.List {
			line := fset.Position(c.Pos()).Line
			for i, l := range strings.Split(c.Text, "\n") {
				out = append(out, citedText{l, line + i})
			}
		}
	}
	return out
}

// gitFiles lists every tracked file.
func gitFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
