package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSampleConfigLoadsAndValidates(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "..", "scripts", "lmwarden.yaml"))
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
	case !mc.SpillThreshold.Auto:
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
		{"models:\n- name: a\n" + good + "  spill_threshold: lots\n", `line 5: models[0].spill_threshold: want a number, auto or prefill, got "lots"`},
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
		{"models:\n- name: a\n" + good + "  colour: blue\n", "line 5: models[0].colour: unknown field (known: name, frontend,"},
		{"models:\n- name: a\n" + good + "  admission: {mode: spill, colour: blue}\n", "models[0].admission.colour: unknown field"},
		{"models:\n- name: a\n" + good + "  session_ttl: soon\n", `models[0].session_ttl: want a duration such as 30s or 250ms, got "soon"`},
		{"models:\n- name: a\n" + good + "  affinity: maybe\n", `models[0].affinity: want true or false, got "maybe"`},
		{"models:\n- name: a\n  frontend: 127.0.0.1:8000\n  endpoint: http://127.0.0.1:9000\n  ranks: four\n", `models[0].ranks: want a whole number, got "four"`},
		{"models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: http://127.0.0.1:9001\n", `models[0].replicas: want a list, got "http://127.0.0.1:9001"`},
		{"models:\n- name: a\n" + good + "  admission: {fill: lots}\n", `models[0].admission.fill: want a number, got "lots"`},
		{"models: {name: a}\n", "models: want a list, got a mapping"},
		{"models:\n- name: a\n  frontend: [127.0.0.1:8000]\n", "models[0].frontend: want a string, got a list"},
		{"models:\n- name: a\n" + good + "  spill_threshold: [8]\n", "models[0].spill_threshold: want a number, auto or prefill, got a list"},
		{"models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001\n", "line "},
		{"models:\n- name: a\n" + good + "  admission: {mode: park}\n", "models[0].admission.mode: "},
		{"models:\n- name: a\n" + good + "  admission: {fill: 9}\n", "models[0].admission.fill: "},
		{"models:\n- name: a\n" + good + "  admission: {timeout: -1s}\n", "models[0].admission.timeout: "},
		{"pollinterval: 1s\nmodels:\n- name: a\n" + good, "line 1: pollinterval: unknown field"},
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

func TestConfigReportsEveryProblemAtOnce(t *testing.T) {
	const text = `poll_interval: often
models:
  - name: a
    frontend: 127.0.0.1:8000
    replicas: [http://127.0.0.1:9001, ftp://x:1]
    spill_threshold: lots
    colour: blue
  - name: b
    replicas: [http://127.0.0.1:9002]
    admission: {mode: park}
`
	path := filepath.Join(t.TempDir(), "lmwarden.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v (%T): want a *ConfigError", err, err)
	}
	want := []FieldError{
		{Path: "poll_interval", Line: 1, Msg: `want a duration such as 30s or 250ms, got "often"`},
		{Path: "models[0].replicas[1]", Line: 5},
		{Path: "models[0].spill_threshold", Line: 6, Msg: `want a number, auto or prefill, got "lots"`},
		{Path: "models[0].colour", Line: 7},
		{Path: "models[1].frontend", Line: 8, Msg: "required (or set listen)"},
		{Path: "models[1].admission.mode", Line: 10},
	}
	if len(ce.Problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(ce.Problems), len(want), err)
	}
	for i, w := range want {
		got := ce.Problems[i]
		if got.Path != w.Path || got.Line != w.Line || (w.Msg != "" && got.Msg != w.Msg) {
			t.Errorf("problem %d = %+v, want %+v", i, got, w)
		}
	}
	if msg := err.Error(); !strings.HasPrefix(msg, path+": invalid config: 6 problems:\n  line 1: poll_interval: ") {
		t.Errorf("message does not start with the file and the count:\n%s", msg)
	}
}

func TestConfigFieldsLeftOutKeepTheirDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("admin: off\nmodels:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n  admission: {timeout: 5s}\n  session_headers: [X-Mine]\n"))
	if err != nil {
		t.Fatal(err)
	}
	mc := c.Models[0]
	if c.Admin != "" {
		t.Errorf("admin: off gave %q", c.Admin)
	}
	if mc.Admission.Timeout != 5*time.Second || mc.Admission.Mode != DefaultAdmission.Mode || mc.Admission.QueueMax != DefaultAdmission.QueueMax {
		t.Errorf("admission %+v: want timeout 5s and the other defaults", mc.Admission)
	}
	if strings.Join(mc.SessionHeaders, ",") != "X-Mine" {
		t.Errorf("session_headers %v: a list in the file replaces the default list", mc.SessionHeaders)
	}
	if len(DefaultSessionHeaders) != 2 || DefaultSessionHeaders[0] != "X-Claude-Code-Session-Id" {
		t.Errorf("decoding changed the defaults: %v", DefaultSessionHeaders)
	}
}

// TestSampleConfigListsEveryFieldAtItsDefault keeps scripts/lmwarden.yaml
// complete: every field the decoder knows appears in it (set, or in a
// comment where it has no default), the daemon's fields and the first
// model's placement fields at their defaults; and docs/config.md names
// every field.
func TestSampleConfigListsEveryFieldAtItsDefault(t *testing.T) {
	sample, err := os.ReadFile(filepath.Join("..", "..", "scripts", "lmwarden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range configFields(reflect.TypeFor[Config](), "") {
		leaf := f[strings.LastIndexByte(f, '.')+1:]
		if !regexp.MustCompile(`(?m)^\s*(#\s*)?(-\s*)?` + regexp.QuoteMeta(leaf) + `:`).Match(sample) {
			t.Errorf("scripts/lmwarden.yaml does not list %s", f)
		}
		inDoc := strings.TrimPrefix(f, "models.")
		if !strings.Contains(string(doc), "`"+inDoc+"`") && !strings.Contains(string(doc), "`"+inDoc+"`,") {
			t.Errorf("docs/config.md does not document %s", inDoc)
		}
	}

	c, err := ParseConfig(sample)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if c.Admin != def.Admin || c.Datapath != def.Datapath || c.PollInterval != def.PollInterval ||
		c.PollTimeout != def.PollTimeout || c.UnhealthyAfter != def.UnhealthyAfter || c.HitRateWindow != def.HitRateWindow || c.HashKey != nil {
		t.Errorf("the sample's daemon fields are not the defaults: %+v", c)
	}
	got, want := c.Models[0], DefaultModel(c.Models[0].Name)
	got.Frontend, got.Replicas = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the sample's first model is not at the defaults:\n got %+v\nwant %+v", got, want)
	}
}

// configFields lists the paths of every field the decoder reads (list
// elements without their index: models.policy).
func configFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[SpillThreshold]() {
			out = append(out, configFields(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// TestConfigDocShowsWhatTheLoaderSays checks docs/config.md's example
// error against the loader itself.
func TestConfigDocShowsWhatTheLoaderSays(t *testing.T) {
	const file = `admin: 127.0.0.1:9100
datapath: auto
poll_timeout: 2s
poll_interval: often
models:
  - name: qwen3-4b
    frontend: 127.0.0.1:8000
    replicas: [http://127.0.0.1:8101]
    spill_threshold: lots
    colour: blue
`
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```\nlmwarden.yaml: invalid config")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/config.md has no example error block")
	}
	_, err = ParseConfig([]byte(file))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v: want a *ConfigError", err)
	}
	ce.File = "lmwarden.yaml"
	if want := "lmwarden.yaml: invalid config" + block; ce.Error()+"\n" != want {
		t.Errorf("the loader says:\n%s\ndocs/config.md says:\n%s", ce.Error(), want)
	}
}

func TestHashKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	os.WriteFile(good, []byte("000102030405060708090a0b0c0d0e0f\n"), 0o600)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("nope"), 0o600)
	model := "models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:8100]\n"
	c, err := ParseConfig([]byte("hash_key_file: " + good + "\n" + model))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HashKey) != 16 || c.HashKey[15] != 0x0f {
		t.Errorf("key %x", c.HashKey)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("validating again: %v", err)
	}
	for _, cfg := range []string{
		"hash_key_file: " + bad + "\n",
		"hash_key_file: " + filepath.Join(dir, "missing") + "\n",
		"hash_key: 000102030405060708090a0b0c0d0e0f\nhash_key_file: " + good + "\n",
	} {
		if _, err := ParseConfig([]byte(cfg + model)); err == nil || !strings.Contains(err.Error(), "hash_key_file") {
			t.Errorf("%q: %v, want a hash_key_file problem", cfg, err)
		}
	}
}

// access_log is on unless the file says false; anything but a boolean is
// refused with its line.
func TestAccessLogDefaultsOn(t *testing.T) {
	base := "models:\n  - name: m\n    frontend: 127.0.0.1:8000\n    replicas: [http://127.0.0.1:8100]\n"
	for _, c := range []struct {
		yaml string
		on   bool
	}{{base, true}, {"access_log: true\n" + base, true}, {"access_log: false\n" + base, false}} {
		cfg, err := ParseConfig([]byte(c.yaml))
		if err != nil || cfg.AccessLogOn() != c.on {
			t.Errorf("%q: on=%v (%v), want %v", c.yaml, cfg != nil && cfg.AccessLogOn(), err, c.on)
		}
	}
	if _, err := ParseConfig([]byte("access_log: sometimes\n" + base)); err == nil || !strings.Contains(err.Error(), "line 1: access_log: want true or false") {
		t.Errorf("access_log: sometimes: %v", err)
	}
}

func TestSpillThresholdReadsANumberAutoOrPrefill(t *testing.T) {
	for v, want := range map[string]SpillThreshold{
		"12":      {N: 12},
		"auto":    {Auto: true},
		"prefill": {Auto: true, Prefill: true},
	} {
		c, err := ParseConfig([]byte("models:\n- name: a\n  frontend: 127.0.0.1:8000\n  replicas: [http://127.0.0.1:9001]\n  spill_threshold: " + v + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := c.Models[0].SpillThreshold; got != want || got.String() != v {
			t.Errorf("spill_threshold: %s gave %+v (%s), want %+v", v, got, got, want)
		}
	}
}
