package picker

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// The picker's admin API (HTTP; docs/multihost.md). The model endpoints
// answer in the warden's shapes, with the hosts as the replicas, so
// `lmwarden status --admin` and `lmwarden sessions --admin` read a picker
// as they read a warden.
//
//	GET /api/v1/hosts      every host: endpoint, admin URL, health, what its warden last said
//	GET /api/v1/models     the Model over the hosts (adminapi.ModelsResponse)
//	GET /api/v1/sessions   the conversations and the host each is on (keyed hashes only)
//	GET /healthz           200 while the process serves
//	GET /readyz            200 while at least one host takes placements, else 503 and why
//	GET /metrics           Prometheus: lmwarden_picker_*, go_*, process_*

// HostsResponse is the body of GET /api/v1/hosts.
type HostsResponse struct {
	Ready bool         `json:"ready"`
	Hosts []HostStatus `json:"hosts"`
}

// ReadyResponse is the body of GET /readyz.
type ReadyResponse struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
	Hosts   int      `json:"hosts"`
	Healthy int      `json:"healthy_hosts"`
}

// adminHandler serves the admin API of reg; serving says whether the
// picker's gRPC listener accepts streams (false while it starts or stops).
func adminHandler(reg *Registry, registry *prometheus.Registry, serving func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/hosts", func(rw http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(rw, http.StatusOK, HostsResponse{Ready: reg.Ready(), Hosts: reg.Hosts()})
	})
	mux.HandleFunc("GET /api/v1/models", func(rw http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(rw, http.StatusOK, adminapi.ModelsResponse{Models: []adminapi.ModelStatus{reg.Model().Status()}})
	})
	mux.HandleFunc("GET /api/v1/models/{name}", func(rw http.ResponseWriter, r *http.Request) {
		m := reg.Model()
		if r.PathValue("name") != m.Name() {
			adminapi.WriteError(rw, http.StatusNotFound, fmt.Errorf("%v: %q", adminapi.ErrUnknownModel, r.PathValue("name")))
			return
		}
		adminapi.WriteJSON(rw, http.StatusOK, m.Status())
	})
	mux.HandleFunc("GET /api/v1/sessions", func(rw http.ResponseWriter, r *http.Request) {
		// One page, as the warden's own (docs/admin.md): one model here.
		limit := adminapi.DefaultSessionsLimit
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > adminapi.SessionsPageMax {
				adminapi.WriteError(rw, http.StatusBadRequest, fmt.Errorf("limit %q: want 1 to %d (a page; follow next for more)", v, adminapi.SessionsPageMax))
				return
			}
			limit = n
		}
		after := placement.NewestKey
		if v := r.URL.Query().Get("after"); v != "" {
			c, err := adminapi.ParseSessionCursor(v)
			if err != nil || c.Model != 0 {
				adminapi.WriteError(rw, http.StatusBadRequest, fmt.Errorf("after %q: not a cursor of this picker", v))
				return
			}
			after = placement.SessionKey{LastSeen: c.LastSeen, Hash: c.Hash}
		}
		m := reg.Model()
		rows, last := m.SessionsPage(time.Now(), after, limit)
		out := adminapi.SessionsResponse{Total: m.LiveSessions(), Sessions: rows}
		if len(rows) == limit {
			out.Next = adminapi.SessionCursor{LastSeen: last.LastSeen, Hash: last.Hash}.String()
		}
		adminapi.WriteJSON(rw, http.StatusOK, out)
	})
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		hosts := reg.Hosts()
		rr := ReadyResponse{Ready: true, Hosts: len(hosts)}
		for _, h := range hosts {
			if h.Healthy {
				rr.Healthy++
			}
		}
		if !serving() {
			rr.Ready = false
			rr.Reasons = append(rr.Reasons, "the ext_proc listener is not serving (starting or shutting down)")
		}
		if rr.Healthy == 0 {
			rr.Ready = false
			rr.Reasons = append(rr.Reasons, fmt.Sprintf("none of %d hosts takes placements (their wardens' admin API: GET /readyz and /api/v1/models)", len(hosts)))
		}
		code := http.StatusOK
		if !rr.Ready {
			code = http.StatusServiceUnavailable
		}
		adminapi.WriteJSON(rw, code, rr)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return mux
}
