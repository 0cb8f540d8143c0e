package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// GET /api/v1/sessions?model=NAME&limit=N&after=CURSOR answers one page:
// at most N sessions (default adminapi.DefaultSessionsLimit, at most
// adminapi.SessionsPageMax), model by model, each model's newest first,
// after the cursor of the previous page's next. Reads are open to any
// local user (they show keyed hashes only), so what one may take is
// bounded: a page's memory, and concurrentPageReads pages read at once
// (each scans the table, a chunk at a time under the model's lock: a
// placement never waits for a whole scan); a read that waits for its turn
// longer than its client does is dropped.

// concurrentPageReads is how many session pages are read at once.
const concurrentPageReads = 2

func (w *Warden) handleSessions(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := sessionsLimit(q.Get("limit"))
	if err != nil {
		adminapi.WriteError(rw, http.StatusBadRequest, err)
		return
	}
	after := adminapi.SessionCursor{LastSeen: placement.NewestKey.LastSeen, Hash: placement.NewestKey.Hash}
	if v := q.Get("after"); v != "" {
		if after, err = adminapi.ParseSessionCursor(v); err != nil {
			adminapi.WriteError(rw, http.StatusBadRequest, err)
			return
		}
	}
	models := w.models
	if name := q.Get("model"); name != "" {
		m := w.byName[name]
		if m == nil {
			adminapi.WriteError(rw, http.StatusNotFound, fmt.Errorf("%w: %q", adminapi.ErrUnknownModel, name))
			return
		}
		models = []*placement.Model{m}
	}
	select {
	case w.pageReads <- struct{}{}:
		defer func() { <-w.pageReads }()
	case <-r.Context().Done():
		return
	}
	adminapi.WriteJSON(rw, http.StatusOK, sessionsPage(models, after, limit, time.Now()))
}

// sessionsPage reads one page of models' sessions after the cursor (its
// Model indexes models).
func sessionsPage(models []*placement.Model, after adminapi.SessionCursor, limit int, now time.Time) adminapi.SessionsResponse {
	out := adminapi.SessionsResponse{Sessions: []adminapi.SessionInfo{}}
	for _, m := range models {
		out.Total += m.LiveSessions()
	}
	for i := after.Model; i < len(models) && len(out.Sessions) < limit; i++ {
		key := placement.NewestKey
		if i == after.Model {
			key = placement.SessionKey{LastSeen: after.LastSeen, Hash: after.Hash}
		}
		rows, last := models[i].SessionsPage(now, key, limit-len(out.Sessions))
		out.Sessions = append(out.Sessions, rows...)
		if len(out.Sessions) == limit {
			out.Next = adminapi.SessionCursor{Model: i, LastSeen: last.LastSeen, Hash: last.Hash}.String()
		}
	}
	return out
}

// sessionsLimit reads ?limit=.
func sessionsLimit(v string) (int, error) {
	if v == "" {
		return adminapi.DefaultSessionsLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > adminapi.SessionsPageMax {
		return 0, fmt.Errorf("limit %q: want 1 to %d (a page; follow next for more)", v, adminapi.SessionsPageMax)
	}
	return n, nil
}
