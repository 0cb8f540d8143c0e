package agent

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

// authWarden is a warden (not started) whose admin handler the tests call
// directly, with its log.
func authWarden(t *testing.T, hosts ...string) (*Warden, *bytes.Buffer) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Models[0].Frontend = "127.0.0.1:18000"
	cfg.Models[0].Replicas = []string{"http://127.0.0.1:1"}
	cfg.AdminHosts = hosts
	var log bytes.Buffer
	w, err := NewWithOptions(cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), AdminToken: strings.Repeat("t", 64)})
	if err != nil {
		t.Fatal(err)
	}
	return w, &log
}

func do(h http.Handler, method, host, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://"+host+"/api/v1/models/default/policy", strings.NewReader(body))
	if method == http.MethodGet {
		req = httptest.NewRequest(method, "http://"+host+"/api/v1/models", nil)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestAdminWritesNeedTheToken(t *testing.T) {
	w, log := authWarden(t)
	h := w.AdminHandler()
	tok := w.AdminToken()
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"a wrong token", []string{"Authorization", "Bearer " + strings.Repeat("x", 64)}, http.StatusUnauthorized},
		{"the token without its scheme", []string{"Authorization", tok}, http.StatusUnauthorized},
		{"the token", []string{"Authorization", "Bearer " + tok}, http.StatusOK},
		{"the token, from another site's page", []string{"Authorization", "Bearer " + tok, "Origin", "http://attacker.example"}, http.StatusForbidden},
		{"the token, from the dashboard", []string{"Authorization", "Bearer " + tok, "Origin", "http://127.0.0.1:9100"}, http.StatusOK},
	} {
		rec := do(h, http.MethodPut, "127.0.0.1:9100", `{"policy":"random"}`, tc.header...)
		if rec.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body.String(), tc.want)
		}
		if tc.want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", tc.name)
		}
	}
	if got := do(h, http.MethodGet, "127.0.0.1:9100", ""); got.Code != http.StatusOK {
		t.Errorf("a read without a token: %d, want 200", got.Code)
	}
	l := log.String()
	for _, want := range []string{`msg="admin write refused" reason="no valid token"`, `msg="admin write refused" reason=origin`,
		`msg="admin change" model=default setting=policy from=sticky to=random origin=`} {
		if !strings.Contains(l, want) {
			t.Errorf("the log lacks %q:\n%s", want, l)
		}
	}
}

func TestAdminChecksTheHost(t *testing.T) {
	w, _ := authWarden(t, "warden.internal")
	h := w.AdminHandler()
	for host, want := range map[string]int{
		"127.0.0.1:9100":        http.StatusOK,
		"[::1]:9100":            http.StatusOK,
		"localhost:9100":        http.StatusOK,
		"LOCALHOST":             http.StatusOK,
		"10.1.2.3":              http.StatusOK,
		"warden.internal:9100":  http.StatusOK,
		"attacker.example:9100": http.StatusForbidden,
		"127.0.0.1.nip.io:9100": http.StatusForbidden,
		"localhost.attacker.io": http.StatusForbidden,
	} {
		if got := do(h, http.MethodGet, host, ""); got.Code != want {
			t.Errorf("Host %s: %d, want %d", host, got.Code, want)
		}
	}
}

func TestPeerUIDFindsTheClientsUser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		uid, ok := peerUID(r.RemoteAddr)
		if !ok || uid != os.Geteuid() {
			rw.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("peerUID did not find this process's uid %d for its own connection", os.Geteuid())
	}
}

func TestAdminTokenFileIsMadeOnceAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "admin.token")
	tok, err := LoadAdminToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q: want 64 hex digits", tok)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode(), err, want)
		}
	}
	again, err := LoadAdminToken(path)
	if err != nil || again != tok {
		t.Errorf("a restart read %q (%v), want the same token", again, err)
	}
	if got, err := ReadAdminToken(path); err != nil || got != tok {
		t.Errorf("the client read %q (%v)", got, err)
	}
	// A file others may read, or one another user wrote, is refused.
	os.Chmod(path, 0o644)
	if _, err := LoadAdminToken(path); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Errorf("a token file of mode 0644: %v", err)
	}
	os.Chmod(path, 0o600)
	if os.Geteuid() == 0 {
		os.Chown(path, 65534, 65534)
		if _, err := LoadAdminToken(path); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("a token file nobody owns: %v", err)
		}
	}
	var st syscall.Stat_t
	if syscall.Stat(path, &st) == nil && st.Uid == 65534 {
		os.Remove(path)
	}
	os.WriteFile(path, []byte("short\n"), 0o600)
	if _, err := LoadAdminToken(path); err == nil {
		t.Error("a token of 5 characters was accepted")
	}
}
