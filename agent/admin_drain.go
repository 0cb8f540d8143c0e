package agent

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// handleDrain starts or ends the drain of one replica (PUT
// /api/v1/models/{name}/replicas/{index}/drain, {"drain": true|false}):
// taking a replica out for maintenance without cutting anyone. While it
// drains no new conversation goes there, a live one moves at its next
// turn (placed again as if the replica were down) and the requests in
// flight finish where they are. The drain lasts until undone or until the
// warden restarts; a SIGHUP reload keeps it.
func (w *Warden) handleDrain(rw http.ResponseWriter, r *http.Request) {
	var req adminapi.DrainRequest
	m := w.decodeModelPut(rw, r, &req, `{"drain": true|false}`)
	if m == nil {
		return
	}
	if req.Drain == nil {
		writeError(rw, http.StatusBadRequest, errors.New("body: want {\"drain\": true|false}: drain missing"))
		return
	}
	i, err := strconv.Atoi(r.PathValue("index"))
	if err != nil {
		writeError(rw, http.StatusNotFound, fmt.Errorf("%w: %q: want the replica's index", placement.ErrNoReplica, r.PathValue("index")))
		return
	}
	old := m.Draining(i)
	if err := m.SetDraining(i, *req.Drain); err != nil {
		writeError(rw, http.StatusNotFound, err)
		return
	}
	w.logChange(r, m, "drain replica "+strconv.Itoa(i), old, *req.Drain)
	writeJSON(rw, http.StatusOK, m.Status())
}
