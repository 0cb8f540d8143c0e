package agent

import (
	"path/filepath"
	"testing"
)

// TestSampleConfigModelsBuild: every model of the sample configuration
// makes a Model.
func TestSampleConfigModelsBuild(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "scripts", "lmwarden.yaml"))
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
	c, err := ParseConfig([]byte("models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n  policy: cost\n  admission: {mode: queue, fill: 1.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(c.Models[0], ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Admission()
	if got.Mode != AdmissionQueue || got.Fill != 1.5 || got.QueueMax != DefaultAdmission.QueueMax || got.Timeout != DefaultAdmission.Timeout {
		t.Fatalf("admission %+v: want queue, fill 1.5, other fields default", got)
	}
}
