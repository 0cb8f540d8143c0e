package picker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// HostLoad is what the last poll of a host's warden said about the model
// the picker serves: its replicas, and their load summed over the healthy
// ones (the same numbers that warden places by).
type HostLoad struct {
	Model string `json:"model"`
	// Replicas is the model's replica count on the host; Ready those
	// healthy and polled by the host's warden.
	Replicas int `json:"replicas"`
	Ready    int `json:"ready_replicas"`
	// Serving is the host warden's readiness (GET /readyz): false while it
	// starts or from the first moment of its shutdown.
	Serving bool `json:"serving"`
	// Running, Waiting and KVUsed are sums over the ready replicas
	// (vLLM's num_requests_running and num_requests_waiting, KV use 0-1
	// each), InFlight the requests the host's warden has in flight and
	// Sessions the conversations its table holds.
	Running  float64 `json:"running"`
	Waiting  float64 `json:"waiting"`
	KVUsed   float64 `json:"kv_used"`
	InFlight int     `json:"in_flight"`
	Sessions int     `json:"sessions"`
}

// Healthy says whether the host takes new requests: its warden is ready
// and has a ready replica of the model.
func (l HostLoad) Healthy() bool { return l.Serving && l.Ready > 0 }

// metrics is the host as a replica of the picker's Model. The load formula
// (agent/placement/placement.go) weighs running, waiting and KV use per replica;
// summed over the host's replicas, a host's load is the sum of its
// replicas' loads, so hosts compare as their warden compares replicas.
func (l HostLoad) metrics() placement.ReplicaMetrics {
	return placement.ReplicaMetrics{Healthy: l.Healthy(), Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsed}
}

// errPoll is a host warden that did not answer usably.
var errPoll = errors.New("host poll")

// maxAdminBytes bounds one admin API answer (a model with hundreds of
// replicas is tens of KiB; the session list of 100k sessions about 15 MiB).
const maxAdminBytes = 64 << 20

// pollHost reads the host warden's readiness and its models. A warden that
// answers /readyz with 503 is reachable but not taking traffic (starting,
// or draining for a shutdown): that is a result, not a failure.
func pollHost(ctx context.Context, c *http.Client, h Host, model string) (HostLoad, error) {
	serving, err := readyz(ctx, c, h.Admin)
	if err != nil {
		return HostLoad{}, err
	}
	var mr adminapi.ModelsResponse
	if err := getJSON(ctx, c, h.Admin+"/api/v1/models", &mr); err != nil {
		return HostLoad{}, err
	}
	l, err := loadFrom(mr.Models, model)
	if err != nil {
		return HostLoad{}, err
	}
	l.Serving = serving
	return l, nil
}

// readyz is the warden's readiness: 200 ready, 503 not (either is an
// answer); a warden too old to have /readyz (404) counts as ready.
func readyz(ctx context.Context, c *http.Client, base string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, fmt.Errorf("%w: %v", errPoll, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNotFound:
		return true, nil
	case http.StatusServiceUnavailable:
		return false, nil
	}
	return false, fmt.Errorf("%w: %s/readyz: %s", errPoll, base, resp.Status)
}

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errPoll, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s: %s", errPoll, u, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAdminBytes)).Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", errPoll, u, err)
	}
	return nil
}

// loadFrom finds the model among a warden's models ("" accepts a warden
// that serves exactly one) and sums its ready replicas.
func loadFrom(models []adminapi.ModelStatus, model string) (HostLoad, error) {
	var ms *adminapi.ModelStatus
	names := make([]string, len(models))
	for i := range models {
		names[i] = models[i].Name
		if models[i].Name == model || (model == "" && len(models) == 1) {
			ms = &models[i]
		}
	}
	if ms == nil {
		if model == "" {
			return HostLoad{}, fmt.Errorf("%w: the warden serves %d models (%s): name one with --model", errPoll, len(models), strings.Join(names, ", "))
		}
		return HostLoad{}, fmt.Errorf("%w: the warden serves no model %q (it serves %s)", errPoll, model, strings.Join(names, ", "))
	}
	l := HostLoad{Model: ms.Name, Replicas: len(ms.Replicas), InFlight: ms.InFlight, Sessions: ms.Sessions}
	for _, r := range ms.Replicas {
		if !r.Healthy || r.ObservedAt == nil {
			continue
		}
		l.Ready++
		l.Running += r.Running
		l.Waiting += r.Waiting
		l.KVUsed += r.KVUsed
	}
	return l, nil
}

// hostSessions reads the live sessions of the model on a host (hashes
// only: the host warden never had more), page by page.
func hostSessions(ctx context.Context, c *http.Client, h Host, model string) ([]adminapi.SessionInfo, error) {
	q := url.Values{"limit": {strconv.Itoa(adminapi.SessionsPageMax)}}
	if model != "" {
		q.Set("model", model)
	}
	var all []adminapi.SessionInfo
	for {
		var sr adminapi.SessionsResponse
		if err := getJSON(ctx, c, h.Admin+"/api/v1/sessions?"+q.Encode(), &sr); err != nil {
			return nil, err
		}
		all = append(all, sr.Sessions...)
		if sr.Next == "" || len(sr.Sessions) == 0 {
			return all, nil
		}
		q.Set("after", sr.Next)
	}
}

// sessionTimeout bounds reading one host's session list (larger than a
// poll: it can be megabytes).
const sessionTimeout = 10 * time.Second
