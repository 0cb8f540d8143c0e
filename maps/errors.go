package maps

import "errors"

var (
	// ErrLocked: another warden holds the pinned state.
	ErrLocked = errors.New("maps: pinned state is locked by another warden")
	// ErrNotLoaded: nothing is pinned at the directory.
	ErrNotLoaded = errors.New("maps: no pinned state")
	// ErrUnsupported: the kernel or our privileges lack what the data path needs.
	ErrUnsupported = errors.New("maps: kernel data path unsupported")
	// ErrNoSocket: the socket cookie is not registered.
	ErrNoSocket = errors.New("maps: socket not registered")
	// ErrFrontendExists: the frontend address is already dispatched.
	ErrFrontendExists = errors.New("maps: frontend already registered")
)
