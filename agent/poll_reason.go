package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// ErrNoVLLMSeries: a replica answered /metrics without any vllm: series.
// Such a backend (another server on the port, a URL one path off) would
// otherwise look healthy with load 0 and draw every new conversation.
var ErrNoVLLMSeries = errors.New("/metrics has no vllm: series (is this URL a vLLM server?)")

// checkVLLMSeries fails a scrape whose families include no vLLM one.
func checkVLLMSeries(fams map[string]*dto.MetricFamily) error {
	for name := range fams {
		if strings.HasPrefix(name, "vllm:") {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrScrape, ErrNoVLLMSeries)
}

// transportErr drops net/http's `Get "URL":` wrapper: the reason names
// the request, and the replica's URL is beside it wherever it is shown.
func transportErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// pollReason is a failed poll as an operator reads it beside the replica:
// `GET /health: dial tcp 127.0.0.1:8100: connect: connection refused`,
// `GET /health: HTTP 503 Service Unavailable`, a timeout named by its
// setting, or ErrNoVLLMSeries.
func pollReason(err error) string {
	if err == nil {
		return ""
	}
	s := strings.TrimPrefix(err.Error(), ErrScrape.Error()+": ")
	if errors.Is(err, context.DeadlineExceeded) {
		stage, _, _ := strings.Cut(s, ": ")
		return stage + ": no answer within poll_timeout"
	}
	return s
}

// ProbeReplica polls base once as the poller does (GET /health, GET
// /metrics, vLLM's series present) and says why that poll would count as
// failed, "" when it would not: `lmwarden check-config --probe`.
func ProbeReplica(ctx context.Context, c *http.Client, base string) string {
	base = strings.TrimRight(base, "/")
	err := scrapeHealth(ctx, c, base)
	if err == nil {
		var fams map[string]*dto.MetricFamily
		if fams, err = scrapeMetrics(ctx, c, base); err == nil {
			err = checkVLLMSeries(fams)
		}
	}
	return pollReason(err)
}
