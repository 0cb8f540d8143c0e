package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/maps"
)

// sessionsFromMaps reads the pinned sessions map directly (for
// `lmwarden sessions --from-maps`): it works while the warden runs, and
// after it stopped. The map holds no model name, only the model's index in
// the config, so Model is "#N". Newest first, at most limit (0: all).
func sessionsFromMaps(dir string, limit int) (adminapi.SessionsResponse, error) {
	var out adminapi.SessionsResponse
	err := maps.ReadSessions(dir, func(h uint64, v maps.Session) bool {
		out.Sessions = append(out.Sessions, adminapi.SessionInfo{
			Model: fmt.Sprintf("#%d", v.Model), Hash: fmt.Sprintf("%016x", h), Replica: int(v.Replica),
			LastSeen: time.Unix(0, int64(v.LastSeenNs)),
		})
		return true
	})
	if err != nil {
		return out, err
	}
	sort.Slice(out.Sessions, func(i, j int) bool { return out.Sessions[i].LastSeen.After(out.Sessions[j].LastSeen) })
	if limit > 0 && len(out.Sessions) > limit {
		out.Sessions = out.Sessions[:limit]
	}
	return out, nil
}
