package main

import (
	"fmt"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
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
func admissionFor(mode string, timeout time.Duration, fill, quantum float64) (config.AdmissionConfig, error) {
	m, err := config.ParseAdmissionMode(mode)
	switch {
	case err != nil:
		return config.AdmissionConfig{}, fmt.Errorf("--admission: %v: %w", err, errUsage)
	case timeout <= 0:
		return config.AdmissionConfig{}, fmt.Errorf("--admission-timeout %v: want a positive duration: %w", timeout, errUsage)
	case fill <= 0 || fill > 4:
		return config.AdmissionConfig{}, fmt.Errorf("--admission-fill %v: want a share of the KV capacity in (0, 4]: %w", fill, errUsage)
	case quantum <= 0:
		return config.AdmissionConfig{}, fmt.Errorf("--admission-quantum %v: want a positive multiple of the re-prefill time: %w", quantum, errUsage)
	}
	return config.AdmissionConfig{Mode: m, Timeout: timeout, Fill: fill, Quantum: quantum}, nil
}
