package layering

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	module    = "github.com/lmwarden/lmwarden"
	rulesDoc  = "docs/architecture.md"
	beginMark = "<!-- import-rules: begin -->"
	endMark   = "<!-- import-rules: end -->"
)

// rule is one row of the table: what a package may import, and what its
// tests may import besides. any: every project package.
type rule struct {
	imports, tests       []string
	anyImport, anyInTest bool
}

// pkg is what `go list -json` says about one package, paths relative to the
// module.
type pkg struct {
	path                 string
	imports, testImports []string
	doc                  string // the package comment's first sentence
}

func TestEveryPackageImportsOnlyWhatArchitectureAllows(t *testing.T) {
	root := moduleRoot(t)
	f, err := os.Open(filepath.Join(root, rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := parseRules(f)
	if err != nil {
		t.Fatalf("%s: %v", rulesDoc, err)
	}
	pkgs := listPackages(t, root)
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages; the check would check nothing", len(pkgs))
	}
	for _, problem := range check(rules, pkgs) {
		t.Error(problem)
	}
}

// TestCheckRefusesAForbiddenImportAndAMissingRow pins that the check can
// fail: a rule it never enforces would pass silently.
func TestCheckRefusesAForbiddenImportAndAMissingRow(t *testing.T) {
	doc := beginMark + "\n" +
		"| package | owns | may import | tests also |\n" +
		"| --- | --- | --- | --- |\n" +
		"| `agent` | decisions | `internal/vllmlb` | `sim` |\n" +
		"| `internal/vllmlb` | balancer | | |\n" +
		"| `cmd/lmwarden` | binary | any | any |\n" +
		"| `gone` | a package since removed | | |\n" +
		endMark + "\n"
	rules, err := parseRules(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	problems := check(rules, []pkg{
		{path: "agent", imports: []string{"internal/vllmlb", "sim"}, testImports: []string{"sim", "agent"}},
		{path: "internal/vllmlb"},
		{path: "cmd/lmwarden", imports: []string{"agent", "sim"}},
		{path: "newpkg"},
	})
	want := []string{
		"agent imports sim, which docs/architecture.md does not allow (allowed: internal/vllmlb)",
		"newpkg has no row in docs/architecture.md's package table: add one",
		"docs/architecture.md's package table has a row for gone, which is no package of the tree: remove it",
	}
	if !slices.Equal(problems, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

func check(rules map[string]rule, pkgs []pkg) []string {
	var problems []string
	for _, p := range pkgs {
		r, ok := rules[p.path]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no row in %s's package table: add one", p.path, rulesDoc))
			continue
		}
		for _, imp := range p.imports {
			if !r.anyImport && !slices.Contains(r.imports, imp) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which %s does not allow (allowed: %s)",
					p.path, imp, rulesDoc, orNone(r.imports)))
			}
		}
		for _, imp := range p.testImports {
			if imp == p.path || r.anyImport || r.anyInTest || slices.Contains(r.imports, imp) || slices.Contains(r.tests, imp) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s's tests import %s, which %s does not allow (allowed: %s)",
				p.path, imp, rulesDoc, orNone(append(slices.Clone(r.imports), r.tests...))))
		}
	}
	// The table is also the map a newcomer reads: a row for a package that
	// moved or went away misleads as much as a missing one.
	var stale []string
	for path := range rules {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.path == path }) {
			stale = append(stale, path)
		}
	}
	slices.Sort(stale)
	for _, path := range stale {
		problems = append(problems, fmt.Sprintf("%s's package table has a row for %s, which is no package of the tree: remove it", rulesDoc, path))
	}
	return problems
}

// TestEveryPackageSaysWhatItIs: each package has a package comment (in
// its doc.go where it has one), which go doc and a newcomer read first.
func TestEveryPackageSaysWhatItIs(t *testing.T) {
	for _, p := range listPackages(t, moduleRoot(t)) {
		if p.doc == "" {
			t.Errorf("%s has no package comment: say what it owns and why, in its doc.go", p.path)
		}
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no project package"
	}
	return strings.Join(s, ", ")
}

// parseRules reads the table between the import-rules markers: the first
// column names the package, the third what it may import, the fourth what
// its tests may import besides; each a list of `backquoted` paths or any.
func parseRules(r io.Reader) (map[string]rule, error) {
	rules := map[string]rule{}
	in, seen := false, false
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == beginMark:
			in, seen = true, true
			continue
		case text == endMark:
			in = false
			continue
		case !in || !strings.HasPrefix(text, "|"):
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		if len(cells) != 4 {
			return nil, fmt.Errorf("line %d: want 4 columns, got %d", line, len(cells))
		}
		names := quoted(cells[0])
		if len(names) != 1 {
			continue // the header and the separator row
		}
		var ru rule
		ru.imports, ru.anyImport = list(cells[2])
		ru.tests, ru.anyInTest = list(cells[3])
		if _, dup := rules[names[0]]; dup {
			return nil, fmt.Errorf("line %d: %s has two rows", line, names[0])
		}
		rules[names[0]] = ru
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seen || len(rules) == 0 {
		return nil, fmt.Errorf("no table between %q and %q", beginMark, endMark)
	}
	return rules, nil
}

func list(cell string) (paths []string, anyPkg bool) {
	if strings.TrimSpace(cell) == "any" {
		return nil, true
	}
	return quoted(cell), false
}

// quoted returns the `backquoted` words of a cell.
func quoted(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside the module")
	}
	return filepath.Dir(gomod)
}

// listPackages runs go list over the module; paths come back relative to
// it, and only the module's own imports are kept.
func listPackages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Doc,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath, Doc                    string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		own := func(paths []string) []string {
			var rel []string
			for _, ip := range paths {
				if r, ok := strings.CutPrefix(ip, module+"/"); ok && !slices.Contains(rel, r) {
					rel = append(rel, r)
				}
			}
			return rel
		}
		path, _ := strings.CutPrefix(p.ImportPath, module+"/")
		pkgs = append(pkgs, pkg{path: path, doc: p.Doc, imports: own(p.Imports), testImports: own(append(p.TestImports, p.XTestImports...))})
	}
	return pkgs
}
