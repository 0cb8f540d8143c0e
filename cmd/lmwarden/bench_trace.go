package main

import "github.com/lmwarden/lmwarden/bench"

// traceFor returns the recorder as the virtual run's Tracer when --trace is
// on, and a nil interface (no tracing) otherwise.
func traceFor(on bool, tr *bench.TraceRecorder) bench.Tracer {
	if !on {
		return nil
	}
	return tr
}
