package maps

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dirLock is an flock on a directory. bpffs holds no regular files, so the
// lock is taken on the directory itself (as tubular does).
type dirLock struct{ f *os.File }

// lockDir takes an exclusive lock on dir; with wait false it fails with
// ErrLocked instead of waiting.
func lockDir(dir string, wait bool) (*dirLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
