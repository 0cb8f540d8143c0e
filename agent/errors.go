package agent

import "errors"

// Sentinel errors of the warden's operator surface. Callers test them with
// errors.Is.
var (
	// ErrScrape: a replica's /metrics or /health could not be read.
	ErrScrape = errors.New("scrape failed")
)
