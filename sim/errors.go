package sim

import "errors"

// Sentinel errors of the simulator.
var (
	ErrUnknownProfile = errors.New("sim: unknown profile")
	ErrBadProfile     = errors.New("sim: bad profile")
	ErrAborted        = errors.New("sim: request aborted")
	ErrPromptTooLong  = errors.New("sim: prompt longer than the model's context")
	ErrEmptyPrompt    = errors.New("sim: empty prompt")
	ErrBadShape       = errors.New("sim: unknown shape")
	ErrNoReplica      = errors.New("sim: no such replica")
	ErrBadReplyModel  = errors.New("sim: bad reply model")

	// errBadRequest marks a request the API rejects with 400.
	errBadRequest = errors.New("invalid request")
)
