package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// The admin API (loopback by default). Its JSON bodies are package
// adminapi's (ModelsResponse, SessionsResponse, AffinityRequest,
// PolicyRequest); the CLI decodes the same types.
//
//	GET /api/v1/models                    every model and its replicas
//	GET /api/v1/models/{name}             one model
//	PUT /api/v1/models/{name}/affinity    {"affinity": true|false}
//	PUT /api/v1/models/{name}/policy      {"policy": "cost"}
//	PUT /api/v1/models/{name}/replicas/{index}/drain  {"drain": true|false} (admin_drain.go)
//	GET /api/v1/sessions?model=&limit=&after=  live sessions, hashes only, a page (admin_sessions.go)
//	GET /api/v1/stats?window=1h           token time series (dashboard)
//	GET /api/v1/warden                    build, start, datapath, readiness (health.go)
//	GET /healthz, GET /readyz             liveness and readiness (health.go)
//	GET /metrics                          Prometheus, lmwarden_* (metrics.go)
//	GET /                                 the dashboard (dashboard.go, web/)

func (w *Warden) routes() {
	w.mux.HandleFunc("GET /api/v1/models", w.handleModels)
	w.mux.HandleFunc("GET /api/v1/models/{name}", w.handleModel)
	w.mux.HandleFunc("PUT /api/v1/models/{name}/affinity", w.handleAffinity)
	w.mux.HandleFunc("PUT /api/v1/models/{name}/policy", w.handlePolicy) // admin_policy.go
	w.mux.HandleFunc("PUT /api/v1/models/{name}/replicas/{index}/drain", w.handleDrain)
	w.mux.HandleFunc("GET /api/v1/sessions", w.handleSessions)
	w.mux.Handle("GET /api/v1/stats", StatsHandler(w.series))
	w.mux.HandleFunc("GET /api/v1/warden", w.handleInfo) // health.go
	w.mux.HandleFunc("GET /healthz", w.handleHealthz)
	w.mux.HandleFunc("GET /readyz", w.handleReadyz)
	w.mux.Handle("GET /metrics", promhttp.HandlerFor(w.registry, promhttp.HandlerOpts{}))
	w.mux.Handle("GET /", DashboardHandler()) // dashboard.go: the embedded web/ files
}

// Handle registers another handler on the admin server (the dashboard at
// "GET /", say). Safe before or after Start.
func (w *Warden) Handle(pattern string, h http.Handler) { w.mux.Handle(pattern, h) }

// AdminHandler is the admin API's handler as the admin server serves it
// (Host check and admin token included: admin_auth.go), for serving it
// elsewhere or in tests.
func (w *Warden) AdminHandler() http.Handler { return w.guard(w.mux) }

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(rw http.ResponseWriter, code int, err error) {
	writeJSON(rw, code, map[string]string{"error": err.Error()})
}

func (w *Warden) handleModels(rw http.ResponseWriter, _ *http.Request) {
	out := adminapi.ModelsResponse{Models: make([]adminapi.ModelStatus, 0, len(w.models))}
	for _, m := range w.models {
		out.Models = append(out.Models, m.Status())
	}
	writeJSON(rw, http.StatusOK, out)
}

func (w *Warden) handleModel(rw http.ResponseWriter, r *http.Request) {
	m := w.byName[r.PathValue("name")]
	if m == nil {
		writeError(rw, http.StatusNotFound, fmt.Errorf("%w: %q", adminapi.ErrUnknownModel, r.PathValue("name")))
		return
	}
	writeJSON(rw, http.StatusOK, m.Status())
}

func (w *Warden) handleAffinity(rw http.ResponseWriter, r *http.Request) {
	var req adminapi.AffinityRequest
	m := w.decodeModelPut(rw, r, &req, `{"affinity": true|false}`)
	if m == nil {
		return
	}
	if req.Affinity == nil {
		writeError(rw, http.StatusBadRequest, errors.New("body: want {\"affinity\": true|false}: affinity missing"))
		return
	}
	old := m.Affinity()
	m.SetAffinity(*req.Affinity)
	w.logChange(r, m, "affinity", old, *req.Affinity)
	writeJSON(rw, http.StatusOK, m.Status())
}

// decodeModelPut finds the model a PUT names and decodes its small JSON
// body into req (unknown fields refused). It answers 404 or 400 itself and
// returns nil then; want describes the expected body in the 400.
func (w *Warden) decodeModelPut(rw http.ResponseWriter, r *http.Request, req any, want string) *placement.Model {
	m := w.byName[r.PathValue("name")]
	if m == nil {
		writeError(rw, http.StatusNotFound, fmt.Errorf("%w: %q", adminapi.ErrUnknownModel, r.PathValue("name")))
		return nil
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeError(rw, http.StatusBadRequest, fmt.Errorf("body: want %s: %v", want, err))
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(rw, http.StatusBadRequest, fmt.Errorf("body: want %s and nothing after it", want))
		return nil
	}
	return m
}

// logChange logs a change made through the admin API, with its origin.
func (w *Warden) logChange(r *http.Request, m *placement.Model, setting string, from, to any) {
	w.log.Info("admin change", append([]any{"model", m.Name(), "setting", setting, "from", from, "to", to}, originAttrs(r)...)...)
}
