package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/lmwarden/lmwarden/agent/adminapi"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Who may do what on the admin API (docs/admin.md):
//
//   - every request must name the warden by a Host it answers to: an IP
//     address, localhost, or a name in admin_hosts. A page of another
//     site whose name an attacker points at 127.0.0.1 (DNS rebinding)
//     sends its own name and is refused, so a browser on the host can
//     neither read the API nor write it from such a page;
//   - reads (GET, HEAD) and /metrics need nothing more: the admin address
//     is loopback by default, and what they show is counts and keyed
//     hashes;
//   - anything else (the PUTs that switch affinity and policy) needs the
//     admin token as "Authorization: Bearer TOKEN"; the token is in a file
//     only the warden's user can read (admin_token_file), so only that user
//     and root can change placement. A browser cannot send the header
//     across sites, and a request with an Origin that is not the warden's
//     own is refused as well.
//
// Every write, refused or done, is logged with where it came from.

// guard wraps the admin handler with the Host check and the write check.
func (w *Warden) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !w.hostAllowed(r.Host) {
			w.log.Warn("admin request refused", requestAttrs(r, "reason", "host", "host", r.Host)...)
			adminapi.WriteError(rw, http.StatusForbidden, fmt.Errorf("the Host %q is not one this warden answers to (an IP address, localhost, or admin_hosts): refused against DNS rebinding", r.Host))
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(rw, r)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !w.originAllowed(o, r.Host) {
			w.log.Warn("admin write refused", requestAttrs(r, "reason", "origin", "request_origin", o)...)
			adminapi.WriteError(rw, http.StatusForbidden, fmt.Errorf("the Origin %q is not this warden's page", o))
			return
		}
		if !w.authorized(r) {
			w.log.Warn("admin write refused", requestAttrs(r, "reason", "no valid token")...)
			rw.Header().Set("WWW-Authenticate", `Bearer realm="lmwarden admin"`)
			adminapi.WriteError(rw, http.StatusUnauthorized, errors.New("admin writes need the admin token: send \"Authorization: Bearer TOKEN\" with the token from the warden's admin_token_file (docs/admin.md)"))
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// authorized reports a request that carries the admin token.
func (w *Warden) authorized(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || w.token == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(tok))), sha256.Sum256([]byte(w.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// hostAllowed reports a Host header the warden answers to: none at all
// (HTTP/1.0), an IP address, localhost, or one of admin_hosts.
func (w *Warden) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if net.ParseIP(h) != nil || strings.EqualFold(h, "localhost") {
		return true
	}
	for _, a := range w.cfg.AdminHosts {
		if strings.EqualFold(h, a) {
			return true
		}
	}
	return false
}

// originAllowed reports an Origin header of the warden's own page: its
// host is the request's Host (same origin) and one the warden answers to.
func (w *Warden) originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, host) && w.hostAllowed(u.Host)
}

// originAttrs say where an admin request came from, for the log: the
// client's address, the local user that owns its socket when the client
// is on this host (from /proc/net/tcp), and its User-Agent.
func originAttrs(r *http.Request) []any {
	a := []any{"origin", r.RemoteAddr}
	if uid, ok := peerUID(r.RemoteAddr); ok {
		a = append(a, "uid", uid)
	}
	if ua := r.UserAgent(); ua != "" {
		a = append(a, "user_agent", ua)
	}
	return a
}

// requestAttrs are a refused request's log fields: a, the request, and
// its origin.
func requestAttrs(r *http.Request, a ...any) []any {
	return append(append(a, "method", r.Method, "path", r.URL.Path), originAttrs(r)...)
}

// AdminToken is the token admin writes must carry (for in-process callers:
// the demo, tests).
func (w *Warden) AdminToken() string { return w.token }

// newToken is 32 random bytes in hex.
func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("agent: no randomness for the admin token: " + err.Error())
	}
	return hex.EncodeToString(b)
}
