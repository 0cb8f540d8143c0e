package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Fuzz targets of what the warden reads from others: the configuration
// file and the admin API's request bodies. Their corpora are kept in
// testdata/fuzz (go test runs them as tests); go test -fuzz FuzzX ./agent/
// explores further.

// FuzzParseConfig: any text either loads into a configuration that passes
// validation, or is refused with a *ConfigError whose every problem says
// something; nothing panics.
func FuzzParseConfig(f *testing.F) {
	if sample, err := os.ReadFile(filepath.Join("..", "scripts", "lmwarden.yaml")); err == nil {
		f.Add(sample)
	}
	f.Add([]byte("models:\n  - name: m\n    frontend: 127.0.0.1:8000\n    replicas: [http://127.0.0.1:8101]\n    pin_sources: [10.0.0.0/8]\n    max_sessions: 5\nbody_timeout: 3s\nadmin_hosts: [warden.internal]\n"))
	f.Add([]byte("poll_interval: often\nmodels: {}\n"))
	f.Add([]byte("models:\n  - &a {name: x}\n  - *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.ParseConfig(data)
		if err != nil {
			var ce *config.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
			for _, p := range ce.Problems {
				if p.Msg == "" {
					t.Fatalf("a problem without a message: %+v", p)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that Validate refuses: %v", err)
		}
		for _, mc := range c.Models {
			if _, err := placement.NewModel(mc, placement.ModelOptions{}); err != nil {
				t.Fatalf("an accepted model does not build: %v", err)
			}
		}
	})
}

// FuzzAdminPut: any body of either PUT, with the token, is answered 200
// (and then the model is as asked) or 400 with a JSON error; nothing else
// changes the model.
func FuzzAdminPut(f *testing.F) {
	for _, b := range []string{`{"affinity": false}`, `{"affinity": true}`, `{"policy": "cost"}`, `{"policy": "nope"}`,
		`{"affinity": "yes"}`, `{"affinity": true, "x": 1}`, `{}`, `null`, `[true]`, `{"policy": ""}`, "{\"policy\":\"hash\"}\n{\"policy\":\"random\"}", "\xff"} {
		f.Add(false, []byte(b))
		f.Add(true, []byte(b))
	}
	f.Fuzz(func(t *testing.T, policy bool, body []byte) {
		w, _ := authWarden(t)
		m := w.Models()[0]
		h := w.AdminHandler()
		what := "affinity"
		if policy {
			what = "policy"
		}
		before := m.Status()
		req := httptest.NewRequest(http.MethodPut, "http://127.0.0.1:9100/api/v1/models/default/"+what, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+w.AdminToken())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer %d is not JSON: %q", rec.Code, rec.Body.String())
		}
		after := m.Status()
		switch rec.Code {
		case http.StatusOK:
			if policy {
				var r adminapi.PolicyRequest
				if json.Unmarshal(body, &r) != nil || after.Policy == "" {
					t.Fatalf("200 for %q, policy %q", body, after.Policy)
				}
			} else {
				var r adminapi.AffinityRequest
				if json.Unmarshal(body, &r) != nil || r.Affinity == nil || after.Affinity != *r.Affinity {
					t.Fatalf("200 for %q, affinity %v", body, after.Affinity)
				}
			}
		case http.StatusBadRequest:
			if after.Affinity != before.Affinity || after.Policy != before.Policy {
				t.Fatalf("400 for %q, yet the model changed", body)
			}
			if _, ok := out["error"]; !ok {
				t.Fatalf("400 without an error: %q", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
