package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsHoldTheCodesOwnCalibration keeps docs/sim.md's calibration table
// equal to what the engine computes (regenerate with
// `lmwarden sim --print-calibration`).
func TestDocsHoldTheCodesOwnCalibration(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "sim.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := CalibrationTable(mustProfile(t, 0))
	if !strings.Contains(string(doc), table) {
		t.Fatalf("docs/sim.md does not hold the current calibration table; replace it with:\n%s", table)
	}
}
