package layering

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trackedText lists the repository's tracked text files (git ls-files),
// skipping generated and binary ones.
func trackedText(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, f := range gitFiles(t, root) {
		switch filepath.Ext(f) {
		case ".go", ".md", ".c", ".h", ".sh", ".yaml", ".js", ".html", ".css", ".service", "":
			if !strings.HasPrefix(f, "l7/http1/testdata/") && !strings.Contains(f, "node_modules") {
				files = append(files, f)
			}
		}
	}
	return files
}

// TestNothingCitesFilesOutsideTheRepository keeps the project standing on
// its own: code, help texts and docs cite files inside it (docs/ says what
// the code relies on), never the briefing documents the project was
// started from.
func TestNothingCitesFilesOutsideTheRepository(t *testing.T) {
	root := moduleRoot(t)
	outside := regexp.MustCompile(`\b(` + "DESIGN" + `|` + "WORKLOAD" + `)\.md\b|/work/` + `shared`)
	for _, f := range trackedText(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d cites %s, which is not in the repository: cite docs/ instead", f, i+1, m)
			}
		}
	}
}

// TestDocLinksPointAtFilesThatExist checks every relative link of the
// README and docs/ (a page moved or renamed leaves none dangling).
func TestDocLinksPointAtFilesThatExist(t *testing.T) {
	root := moduleRoot(t)
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range trackedText(t, root) {
		if filepath.Ext(f) != ".md" || strings.HasPrefix(f, "scripts/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, target)
			}
		}
	}
}
