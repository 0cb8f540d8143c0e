package bench

import "errors"

// Sentinel errors of the benchmark.
var (
	ErrBadArm       = errors.New("bench: unknown arm")
	ErrBadConfig    = errors.New("bench: bad configuration")
	ErrNoReplicas   = errors.New("bench: no replica metrics to read")
	ErrArmSwitch    = errors.New("bench: cannot switch arm through the admin API")
	ErrRequestFail  = errors.New("bench: request failed")
	ErrNoFirstToken = errors.New("bench: stream ended without a content token")
)
