package l7

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestShimMetricsAreDocumented keeps docs/metrics.md and the README's
// metrics table in step with the shim's descriptors (the agent's and the
// kernel datapath's have the same test).
func TestShimMetricsAreDocumented(t *testing.T) {
	descs := []*prometheus.Desc{descShimConns, descShimHeads, descShimAnswered, descShimAbandoned, descDatapathBytes, descOpenConns, descConnLimit, descConnsRefused, descConnsShed}
	for _, path := range []string{filepath.Join("..", "docs", "metrics.md"), filepath.Join("..", "README.md")} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range descs {
			s := d.String()
			s = s[strings.Index(s, `fqName: "`)+len(`fqName: "`):]
			name := s[:strings.IndexByte(s, '"')]
			if !bytes.Contains(doc, []byte("`"+name+"`")) && !bytes.Contains(doc, []byte("`"+name+"{")) {
				t.Errorf("%s does not document %s", path, name)
			}
		}
	}
}
