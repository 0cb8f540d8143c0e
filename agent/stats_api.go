package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// StatsHandler serves GET /api/v1/stats?window=1h from the token series:
// one point per complete slot of the window, pooled and per replica, and a
// summary (prefix-cache hit rate over the window). window is a Go duration
// ("15m", "1h", "300s"), default and cap one hour; anything that does not
// parse as a positive duration is a 400.
func StatsHandler(ts *TokenSeries) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		window, err := parseStatsWindow(r.URL.Query().Get("window"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(ts.Snapshot(window, time.Now()))
	})
}

// parseStatsWindow reads the window query parameter; empty means the whole
// span, longer than the span is capped rather than refused (the caller asked
// for "as much as there is").
func parseStatsWindow(s string) (time.Duration, error) {
	if s == "" {
		return SeriesSpan, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("window %q: want a positive duration such as 15m or 1h", s)
	}
	return min(d, SeriesSpan), nil
}
