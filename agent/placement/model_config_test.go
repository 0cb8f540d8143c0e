package placement

import (
	"path/filepath"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

// TestSampleConfigModelsBuild: every model of the sample configuration
// makes a Model.
func TestSampleConfigModelsBuild(t *testing.T) {
	c, err := config.LoadConfig(filepath.Join("..", "..", "scripts", "lmwarden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mc := range c.Models {
		if _, err := NewModel(mc, ModelOptions{}); err != nil {
			t.Errorf("NewModel(%s): %v", mc.Name, err)
		}
	}
}

func TestConfigAdmissionReachesTheModel(t *testing.T) {
	c, err := config.ParseConfig([]byte("models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n  policy: cost\n  admission: {mode: queue, fill: 1.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(c.Models[0], ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Admission()
	if got.Mode != config.AdmissionQueue || got.Fill != 1.5 || got.QueueMax != config.DefaultAdmission.QueueMax || got.Timeout != config.DefaultAdmission.Timeout {
		t.Fatalf("admission %+v: want queue, fill 1.5, other fields default", got)
	}
}
