package maps

import "errors"

var (
	// ErrLocked: another warden holds the pinned state.
	ErrLocked = errors.New("maps: pinned state is locked by another warden")
	// ErrUnsafe: the state directory is not the warden's own (another user
	// made it, or may replace it); the error says which check failed.
	ErrUnsafe = errors.New("maps: the pinned state's directory is not private to the warden")
	// ErrNotLoaded: nothing is pinned at the directory.
	ErrNotLoaded = errors.New("maps: no pinned state")
	// ErrUnsupported: the kernel or our privileges lack what the data path needs.
	ErrUnsupported = errors.New("maps: kernel data path unsupported")
	// ErrNoSocket: the socket cookie is not registered.
	ErrNoSocket = errors.New("maps: socket not registered")
	// ErrFrontendExists: the frontend address is already dispatched.
	ErrFrontendExists = errors.New("maps: frontend already registered")
)
