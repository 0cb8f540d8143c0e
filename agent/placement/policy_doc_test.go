package placement

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

// TestEveryPolicyIsDocumented keeps the user-facing lists of policies in
// step with the registry (policy.go): a policy added there must be
// described in docs/placement.md and listed wherever a user picks one.
func TestEveryPolicyIsDocumented(t *testing.T) {
	// where: a file, and the part of it that must name every policy: the
	// paragraph (README) or the line (a table row, the sample config's
	// comment) that starts with the marker; "" means the whole file.
	places := []struct{ file, line string }{
		{"README.md", "Selectable policies:"},
		{"docs/placement.md", ""},
		{"docs/config.md", "| `policy` |"},
		{"docs/serve.md", "| `--policy NAME` |"},
		{"scripts/lmwarden.yaml", "    policy: "},
	}
	for _, pl := range places {
		b, err := os.ReadFile(filepath.Join("..", "..", pl.file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if pl.line != "" {
			text = paragraphWith(text, pl.line)
			if text == "" {
				t.Errorf("%s: no line with %q (where the policies are listed)", pl.file, pl.line)
				continue
			}
		}
		for _, p := range config.Policies() {
			if !mentions(text, string(p)) {
				t.Errorf("%s does not list policy %s (near %q)", pl.file, p, pl.line)
			}
		}
	}
}

// paragraphWith returns the first line that starts with marker, and the
// lines after it up to a blank one or a table row or a YAML key (so a
// table row or a config line stands alone), or "".
func paragraphWith(text, marker string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, marker) {
			continue
		}
		end := i + 1
		for end < len(lines) && !endsParagraph(lines[end]) {
			end++
		}
		return strings.Join(lines[i:end], "\n")
	}
	return ""
}

func endsParagraph(l string) bool {
	t := strings.TrimSpace(l)
	return t == "" || strings.HasPrefix(t, "|") || strings.HasSuffix(strings.Fields(t)[0], ":")
}

// mentions reports whether name occurs in text as a whole policy name:
// "sticky" inside "sticky-until-saturated" does not count.
func mentions(text, name string) bool {
	re := regexp.MustCompile(`(^|[^a-z-])` + regexp.QuoteMeta(name) + `($|[^a-z-])`)
	return re.MatchString(text)
}

// TestEveryPolicyNameHasAnImplementation keeps the registry (policy.go)
// and the names a configuration may use (policy_names.go) the same list,
// in the same order.
func TestEveryPolicyNameHasAnImplementation(t *testing.T) {
	names := config.Policies()
	if len(names) != len(policies) {
		t.Fatalf("%d policy names, %d implementations", len(names), len(policies))
	}
	for i, p := range policies {
		if p.name != names[i] {
			t.Errorf("registry entry %d is %q, the names list has %q there", i, p.name, names[i])
		}
	}
}
