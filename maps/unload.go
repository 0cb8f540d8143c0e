package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/bpf"
)

// Unload detaches the programs, removes the frontend addresses the warden
// added to lo, and removes the pinned state. It fails with ErrLocked while
// a warden holds the state: stop it first. Nothing pinned is not an error.
func Unload(opts Options) error {
	dir := opts.dir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	lock, err := lockOpen(f, opts.lockTimeout())
	if err != nil {
		f.Close()
		return err
	}
	defer lock.unlock()

	var errs []error
	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.LmwardenMapLmwFrontends), nil); err == nil {
		var k FrontendKey
		var v FrontendValue
		it := m.Iterate()
		for it.Next(&k, &v) {
			if v.Flags&FrontendOwnAddr != 0 {
				if err := removeLoopbackAddr(keyAddrPort(k).Addr()); err != nil {
					errs = append(errs, err)
				}
			}
		}
		m.Close()
	}
	for _, name := range []string{pinDispatchLink, pinVerdictLink, pinPairLink, pinReplyLink} {
		l, err := link.LoadPinnedLink(filepath.Join(dir, name), nil)
		if err != nil {
			continue
		}
		if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			errs = append(errs, fmt.Errorf("detach %s: %w", name, err))
		}
		l.Unpin()
		l.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
