package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSampleConfigLoadsAndValidates(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "scripts", "lmwarden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 {
		t.Fatalf("models: %d, want 2", len(c.Models))
	}
	m0, m1 := c.Models[0], c.Models[1]
	if m0.ReplicaCount() != 4 || m0.OneEndpoint() || !m0.Affinity || m0.Policy != PolicySticky {
		t.Errorf("models[0] = %+v", m0)
	}
	if !m1.OneEndpoint() || m1.ReplicaCount() != 4 || !m1.SpillThreshold.Auto {
		t.Errorf("models[1] = %+v", m1)
	}
	for _, mc := range c.Models {
		if _, err := NewModel(mc, ModelOptions{}); err != nil {
			t.Errorf("NewModel(%s): %v", mc.Name, err)
		}
	}
}

func TestConfigDefaultsApply(t *testing.T) {
	c, err := ParseConfig([]byte("models:\n- name: m\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n"))
	if err != nil {
		t.Fatal(err)
	}
	mc := c.Models[0]
	switch {
	case c.Admin != DefaultAdmin:
		t.Errorf("admin %q", c.Admin)
	case c.PollInterval != 250*time.Millisecond:
		t.Errorf("poll_interval %v", c.PollInterval)
	case c.UnhealthyAfter != 3:
		t.Errorf("unhealthy_after %d", c.UnhealthyAfter)
	case !mc.Affinity:
		t.Errorf("affinity off by default")
	case mc.SpillThreshold.Auto || mc.SpillThreshold.N != 8:
		t.Errorf("spill_threshold %v", mc.SpillThreshold)
	case mc.Policy != PolicySticky:
		t.Errorf("policy %q", mc.Policy)
	case mc.SessionTTL != 30*time.Minute:
		t.Errorf("session_ttl %v", mc.SessionTTL)
	case strings.Join(mc.SessionHeaders, ",") != "X-Claude-Code-Session-Id,X-Session-Id":
		t.Errorf("session_headers %v", mc.SessionHeaders)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	const good = "  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n"
	cases := []struct{ yaml, want string }{
		{"models: []\n", "models: "},
		{"models:\n- name: a\n" + good + "- name: b\n  frontend: 127.0.0.1:8001\n  replicas: [ftp://x:1]\n", "models[1].replicas[0]: "},
		{"models:\n- name: a\n" + good + "  spill_threshold: 0\n", "models[0].spill_threshold: "},
		{"models:\n- name: a\n" + good + "  spill_threshold: lots\n", "want a number or auto"},
		{"models:\n- name: a\n" + good + "  policy: fastest\n", "models[0].policy: "},
		{"models:\n- name: a\n" + good + "  session_ttl: -1s\n", "models[0].session_ttl: "},
		{"models:\n- name: a\n" + good + "  session_headers: [\"bad header\"]\n", "models[0].session_headers[0]: "},
		{"models:\n- name: a\n  frontend: 127.0.0.1:8000\n  endpoint: http://127.0.0.1:9000\n", "models[0].ranks: "},
		{"models:\n- name: a\n  frontend: 127.0.0.1:8000\n", "models[0].replicas: "},
		{"models:\n- name: a\n  replicas: [http://127.0.0.1:9001]\n", "models[0].frontend: "},
		{"models:\n- name: a\n" + good + "- name: a\n  frontend: 127.0.0.1:8001\n  replicas: [http://127.0.0.1:9001]\n", "models[1].name: "},
		{"models:\n- name: a\n" + good + "- name: b\n" + good, "models[1].frontend: "},
		{"datapath: fast\nmodels:\n- name: a\n" + good, "datapath: "},
		{"poll_interval: 0s\nunhealthy_after: -1\nmodels:\n- name: a\n" + good, "unhealthy_after: "},
		{"hash_key: abc\nmodels:\n- name: a\n" + good, "hash_key: "},
		{"models:\n- name: a\n" + good + "  colour: blue\n", "field colour not found"},
		{"models:\n- name: a\n" + good + "  admission: {mode: park}\n", "models[0].admission.mode: "},
		{"models:\n- name: a\n" + good + "  admission: {fill: 9}\n", "models[0].admission.fill: "},
		{"models:\n- name: a\n" + good + "  admission: {timeout: -1s}\n", "models[0].admission.timeout: "},
		{"pollinterval: 1s\nmodels:\n- name: a\n" + good, "field pollinterval not found"},
	}
	for _, tc := range cases {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil {
			t.Errorf("accepted:\n%s", tc.yaml)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not contain %q", err, tc.want)
		}
	}
}

func TestConfigFlagsOverrideTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyFlags("127.0.0.1:7000", "127.0.0.1:0", "user", []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if c.Models[0].Frontend != "127.0.0.1:7000" || len(c.Models[0].Replicas) != 2 || c.Admin != "127.0.0.1:0" || c.Datapath != "user" {
		t.Errorf("overrides not applied: %+v", c)
	}
	if err := c.ApplyFlags("", "", "", []string{"nope"}); err == nil || !strings.Contains(err.Error(), "models[0].replicas[0]") {
		t.Errorf("bad --replica: %v", err)
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
