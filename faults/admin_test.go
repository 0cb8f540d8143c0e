package faults

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAdminWritesNeedACredential: any local user can reach the admin port
// on loopback. Reads stay open there; a write without the token is
// refused, one with it is logged with its origin; a request whose Host is
// a name the warden does not serve under (DNS rebinding: a page of
// attacker.example that resolves to 127.0.0.1) is refused.
func TestAdminWritesNeedACredential(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	startReplicas(t, 2, replicaOpts{})
	tokenDir := t.TempDir()
	tokenFile := filepath.Join(tokenDir, "admin.token")
	w := startWarden(t, wardenOpts{Replicas: 2, Extra: "admin_token_file: " + tokenFile + "\n"})
	base := "http://" + adminAddr
	put := base + "/api/v1/models/m/policy"

	got := nobodyHTTP(t, "PUT", put, `{"policy":"random"}`, "")
	policy := w.models(t)[0].Policy
	figure(t, "nobody's PUT of the policy without a token: %s (policy now %s)", got, policy)
	if got != "401" || policy != "sticky" {
		t.Errorf("nobody's PUT without a token: %s, policy %s; want 401 and sticky", got, policy)
	}
	read := nobodyHTTP(t, "GET", base+"/api/v1/models", "", "")
	if read != "200" {
		t.Errorf("nobody's GET /api/v1/models: %s, want 200 (reads stay open on loopback)", read)
	}
	rebound := nobodyHTTP(t, "GET", base+"/api/v1/sessions", "", "attacker.example:9100")
	figure(t, "GET /api/v1/sessions with Host attacker.example:9100: %s", rebound)
	if rebound != "403" {
		t.Errorf("Host attacker.example: %s, want 403", rebound)
	}

	if before() {
		return
	}
	fi, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("the token file: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Uid != uint32(os.Geteuid()) {
		t.Errorf("token file %s: mode %v uid %d, want 0600 and the warden's uid", tokenFile, fi.Mode().Perm(), st.Uid)
	}
	token, _ := os.ReadFile(tokenFile)
	req, _ := http.NewRequest("PUT", put, strings.NewReader(`{"policy":"random"}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("User-Agent", "fault-suite")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || w.models(t)[0].Policy != "random" {
		t.Errorf("PUT with the token: %s, policy %s", resp.Status, w.models(t)[0].Policy)
	}
	log := w.out.String()
	for _, want := range []string{`msg="admin change"`, "policy", "random", "origin=127.0.0.1:", "user_agent=fault-suite"} {
		if !strings.Contains(log, want) {
			t.Errorf("the change's log line lacks %q:\n%s", want, log)
		}
	}
	if !strings.Contains(log, `msg="admin write refused"`) {
		t.Errorf("nobody's refused write is not logged:\n%s", log)
	}
}
