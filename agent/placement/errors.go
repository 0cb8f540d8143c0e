package placement

import "errors"

// Sentinel errors of the control plane. Callers test them with errors.Is.
var (
	// ErrNoHealthyReplica: every replica of the model is unhealthy (the shim
	// answers 503 with Retry-After).
	ErrNoHealthyReplica = errors.New("no healthy replica")
	// ErrRetryExhausted: Retry was already used once for this request.
	ErrRetryExhausted = errors.New("retry already used")
	// ErrAdmissionFull: admission's queue at the warden is full (503).
	ErrAdmissionFull = errors.New("admission queue full")
	// ErrNoReplica: an index the model has no replica (or rank) at.
	ErrNoReplica = errors.New("no such replica")
	// ErrWaitClaimed: Claim was already called for this Wait.
	ErrWaitClaimed = errors.New("wait already claimed")
)
