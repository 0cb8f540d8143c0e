package agent

import "errors"

// Sentinel errors of the warden's operator surface. Callers test them with
// errors.Is.
var (
	// ErrUnknownModel: no model has that name (admin API: 404).
	ErrUnknownModel = errors.New("unknown model")
	// ErrScrape: a replica's /metrics or /health could not be read.
	ErrScrape = errors.New("scrape failed")
)
