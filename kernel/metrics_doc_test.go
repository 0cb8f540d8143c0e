package kernel

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestKernelMetricsAreDocumented keeps docs/metrics.md and the README's
// metrics table in step with the kernel datapaths' descriptors (the
// shim's and the agent's have the same test).
func TestKernelMetricsAreDocumented(t *testing.T) {
	for _, path := range []string{filepath.Join("..", "docs", "metrics.md"), filepath.Join("..", "README.md")} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []*prometheus.Desc{descKernelBytes, descKernelResponses, descDispatch, descFallbacks} {
			s := d.String()
			s = s[strings.Index(s, `fqName: "`)+len(`fqName: "`):]
			name := s[:strings.IndexByte(s, '"')]
			if !bytes.Contains(doc, []byte("`"+name+"`")) && !bytes.Contains(doc, []byte("`"+name+"{")) {
				t.Errorf("%s does not document %s", path, name)
			}
		}
	}
}
