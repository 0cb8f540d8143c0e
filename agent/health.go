package agent

import (
	"fmt"
	"net/http"
	"time"
)

// Liveness, readiness and what the warden runs as, on the admin server.
//
//	GET /healthz         200 while the process serves HTTP (liveness: restart it when this fails)
//	GET /readyz          200 when it can serve traffic, else 503 with the reasons (readiness)
//	GET /api/v1/warden   version, start time, datapath, readiness (WardenInfo)

// BuildInfo says which build of the warden runs (lmwarden --version, the
// metric lmwarden_build_info, GET /api/v1/warden).
type BuildInfo struct {
	Version   string `json:"version"`            // release (ldflags) or module version, else "devel"
	Revision  string `json:"revision,omitempty"` // VCS commit, "-dirty" when the tree was modified
	GoVersion string `json:"go_version"`
}

// DatapathInfo is the datapath serve runs with and why (auto says what it found).
type DatapathInfo struct {
	Name   string `json:"name"` // "msg", "skb" or "user"; "" when no shim runs (tests)
	Reason string `json:"reason,omitempty"`
}

// WardenInfo is the body of GET /api/v1/warden.
type WardenInfo struct {
	Build     BuildInfo    `json:"build"`
	StartedAt time.Time    `json:"started_at"`
	Datapath  DatapathInfo `json:"datapath"`
	// AdminTokenFile is where the admin token is (not the token): what
	// the dashboard tells a user whose write it refused.
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	Readiness
}

// Readiness is the body of GET /readyz. The warden is ready when its
// frontends listen (SetServing) and every model has at least one replica
// that is healthy and has answered a poll: a client sent to it then gets
// an answer, not a 503. It is not ready again from the start of a
// shutdown, so a balancer in front stops sending new connections while
// the requests in flight finish.
type Readiness struct {
	Ready   bool             `json:"ready"`
	Reasons []string         `json:"reasons,omitempty"` // why not, one line each
	Models  []ModelReadiness `json:"models"`
}

// ModelReadiness counts one model's replicas that take placements.
type ModelReadiness struct {
	Name     string `json:"name"`
	Ready    int    `json:"ready_replicas"` // healthy and polled at least once
	Replicas int    `json:"replicas"`
}

// SetServing says whether the frontends listen (true once every shim
// serves; false from the start of a shutdown). Until the first true the
// warden is not ready.
func (w *Warden) SetServing(on bool) { w.serving.Store(on) }

// Readiness evaluates /readyz now.
func (w *Warden) Readiness() Readiness {
	r := Readiness{Ready: true, Models: make([]ModelReadiness, 0, len(w.models))}
	if !w.serving.Load() {
		r.Ready = false
		r.Reasons = append(r.Reasons, "frontends not listening (starting or shutting down)")
	}
	for _, m := range w.models {
		s := m.Status()
		mr := ModelReadiness{Name: s.Name, Replicas: len(s.Replicas)}
		for _, rep := range s.Replicas {
			if rep.Healthy && rep.ObservedAt != nil {
				mr.Ready++
			}
		}
		if mr.Ready == 0 {
			r.Ready = false
			r.Reasons = append(r.Reasons, fmt.Sprintf("model %s: none of %d replicas is healthy and polled (GET /health and /metrics)", s.Name, mr.Replicas))
		}
		r.Models = append(r.Models, mr)
	}
	return r
}

// Info is GET /api/v1/warden.
func (w *Warden) Info() WardenInfo {
	return WardenInfo{Build: w.opts.Build, StartedAt: w.series.Started(), Datapath: w.opts.Datapath,
		AdminTokenFile: w.cfg.AdminTokenFile, Readiness: w.Readiness()}
}

func (w *Warden) handleHealthz(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
}

func (w *Warden) handleReadyz(rw http.ResponseWriter, _ *http.Request) {
	r := w.Readiness()
	code := http.StatusOK
	if !r.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(rw, code, r)
}

func (w *Warden) handleInfo(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, w.Info())
}
