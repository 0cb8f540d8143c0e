package main

import (
	"fmt"
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

// admissionFor builds the --admission flags' settings.
func admissionFor(mode string, timeout time.Duration, fill, quantum float64) (agent.AdmissionConfig, error) {
	m, err := agent.ParseAdmissionMode(mode)
	switch {
	case err != nil:
		return agent.AdmissionConfig{}, fmt.Errorf("--admission: %v: %w", err, errUsage)
	case timeout <= 0:
		return agent.AdmissionConfig{}, fmt.Errorf("--admission-timeout %v: want a positive duration: %w", timeout, errUsage)
	case fill <= 0 || fill > 4:
		return agent.AdmissionConfig{}, fmt.Errorf("--admission-fill %v: want a share of the KV capacity in (0, 4]: %w", fill, errUsage)
	case quantum <= 0:
		return agent.AdmissionConfig{}, fmt.Errorf("--admission-quantum %v: want a positive multiple of the re-prefill time: %w", quantum, errUsage)
	}
	return agent.AdmissionConfig{Mode: m, Timeout: timeout, Fill: fill, Quantum: quantum}, nil
}
