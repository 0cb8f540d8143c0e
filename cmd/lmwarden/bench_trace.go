package main

import (
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/bench"
)

// traceFor returns the recorder as the virtual run's Tracer when --trace is
// on, and a nil interface (no tracing) otherwise.
func traceFor(on bool, tr *bench.TraceRecorder) bench.Tracer {
	if !on {
		return nil
	}
	return tr
}

// admissionFor builds --admission's settings ("" keeps the model's).
func admissionFor(mode string, timeout time.Duration, fill float64) agent.AdmissionConfig {
	return agent.AdmissionConfig{Mode: agent.AdmissionMode(mode), Timeout: timeout, Fill: fill}
}
