package agent

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// Liveness, readiness and what the warden runs as, on the admin server.
//
//	GET /healthz         200 while the process serves HTTP (liveness: restart it when this fails)
//	GET /readyz          200 when it can serve traffic, else 503 with the reasons (readiness)
//	GET /api/v1/warden   version, start time, datapath, readiness (WardenInfo)

// SetServing says whether the frontends listen (true once every shim
// serves; false from the start of a shutdown). Until the first true the
// warden is not ready.
func (w *Warden) SetServing(on bool) { w.serving.Store(on) }

// Readiness evaluates /readyz now.
func (w *Warden) Readiness() adminapi.Readiness {
	r := adminapi.Readiness{Ready: true, Models: make([]adminapi.ModelReadiness, 0, len(w.models))}
	if !w.serving.Load() {
		r.Ready = false
		r.Reasons = append(r.Reasons, "frontends not listening (starting or shutting down)")
	}
	for _, m := range w.models {
		s := m.Status()
		mr := adminapi.ModelReadiness{Name: s.Name, Replicas: len(s.Replicas)}
		for _, rep := range s.Replicas {
			switch {
			case rep.Reason != "":
				mr.Unready = append(mr.Unready, fmt.Sprintf("replica %d (%s): %s", rep.Index, rep.URL, rep.Reason))
			case rep.ObservedAt == nil:
				mr.Unready = append(mr.Unready, fmt.Sprintf("replica %d (%s): not polled yet", rep.Index, rep.URL))
			default:
				mr.Ready++
			}
		}
		if mr.Ready == 0 {
			r.Ready = false
			r.Reasons = append(r.Reasons, fmt.Sprintf("model %s: none of %d replicas is healthy and polled (GET /health and /metrics): %s",
				s.Name, mr.Replicas, strings.Join(mr.Unready, "; ")))
		}
		r.Models = append(r.Models, mr)
	}
	return r
}

// readyGauge is lmwarden_ready: /readyz as a metric, so that an alert
// and the board see what a balancer in front sees.
func (w *Warden) readyGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lmwarden_ready",
		Help: "1 when GET /readyz answers 200: every frontend listens and every model has a healthy, polled replica; 0 otherwise (the reasons are in /readyz).",
	}, func() float64 {
		if w.Readiness().Ready {
			return 1
		}
		return 0
	})
}

// Info is GET /api/v1/warden.
func (w *Warden) Info() adminapi.WardenInfo {
	return adminapi.WardenInfo{Build: w.opts.Build, StartedAt: w.series.Started(), Datapath: w.opts.Datapath,
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
