package agent

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
)

// handlePolicy switches the policy a model uses while affinity is on, so
// that an A/B of policies (`lmwarden bench --arms sticky,cost`) runs
// against one warden without restarting it and losing its sessions. The
// session table is kept: a session pinned under one policy stays pinned.
func (w *Warden) handlePolicy(rw http.ResponseWriter, r *http.Request) {
	var req adminapi.PolicyRequest
	m := w.decodeModelPut(rw, r, &req, `{"policy": "name"}`)
	if m == nil {
		return
	}
	if req.Policy == "" {
		adminapi.WriteError(rw, http.StatusBadRequest, errors.New("body: want {\"policy\": \"name\"}: policy missing"))
		return
	}
	old := m.Config().Policy
	if st := m.Status(); st.Policy != "" {
		old = config.Policy(st.Policy)
	}
	if err := m.SetPolicy(config.Policy(req.Policy)); err != nil {
		adminapi.WriteError(rw, http.StatusBadRequest, fmt.Errorf("policy %w", err))
		return
	}
	w.logChange(r, m, "policy", string(old), req.Policy)
	adminapi.WriteJSON(rw, http.StatusOK, m.Status())
}
