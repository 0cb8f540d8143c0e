package picker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every family the picker exports is in docs/multihost.md (what it counts)
// and docs/metrics.md (the list of every metric a user sees).
func TestEveryPickerMetricIsDocumented(t *testing.T) {
	for _, doc := range []string{"multihost.md", "metrics.md"} {
		b, err := os.ReadFile(filepath.Join("..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range pickerDescs {
			s := d.String()
			name := s[strings.Index(s, `fqName: "`)+len(`fqName: "`):]
			name = name[:strings.IndexByte(name, '"')]
			if !strings.Contains(string(b), "`"+name+"`") && !strings.Contains(string(b), "`"+name+"{") {
				t.Errorf("docs/%s does not list %s", doc, name)
			}
		}
	}
}
