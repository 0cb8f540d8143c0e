package config

import (
	"fmt"
	"time"
)

// AdmissionMode says what happens to a session no replica has room for.
type AdmissionMode string

const (
	// AdmissionOff: no capacity check (cost placement only).
	AdmissionOff AdmissionMode = "off"
	// AdmissionSpill: prefer replicas with room; with none, place where the
	// predicted TTFT is lowest anyway. Nobody waits.
	AdmissionSpill AdmissionMode = "spill"
	// AdmissionQueue: a session that is not live and finds no room waits
	// at the warden (always engaged).
	AdmissionQueue AdmissionMode = "queue"
	// AdmissionAuto: queue while the replicas' live context exceeds their
	// caches, spill once it fits again (with hysteresis).
	AdmissionAuto AdmissionMode = "auto"
)

// AdmissionConfig tunes admission.
type AdmissionConfig struct {
	Mode AdmissionMode `yaml:"mode"`
	// QueueMax bounds the requests waiting at the warden.
	QueueMax int `yaml:"queue_max"`
	// Timeout is the longest a request waits at the warden; after it, it is
	// placed where it costs least.
	Timeout time.Duration `yaml:"timeout"`
	// Fill is the share of a replica's KV capacity live sessions may hold
	// (1: all of it).
	Fill float64 `yaml:"fill"`
	// Quantum is how long a session may keep its room while others wait,
	// in multiples of the time its own re-prefill takes (its context over
	// the learned prefill rate); then it yields at the end of a turn.
	Quantum float64 `yaml:"quantum"`
}

// DefaultAdmission is what the cost-model policies run with unless told
// otherwise. The quantum is measured (docs/notes/2026-12-06-placement-history.md, "Choosing the
// quantum").
var DefaultAdmission = AdmissionConfig{Mode: AdmissionAuto, QueueMax: 256, Timeout: 60 * time.Second, Fill: 1, Quantum: 20}

// ParseAdmissionMode reads auto, queue, spill or off.
func ParseAdmissionMode(s string) (AdmissionMode, error) {
	switch m := AdmissionMode(s); m {
	case AdmissionOff, AdmissionSpill, AdmissionQueue, AdmissionAuto:
		return m, nil
	}
	return "", fmt.Errorf("admission %q: want auto, queue, spill or off", s)
}
