// Package safefs checks that a directory or file the warden keeps its
// secrets or its state in can be touched by the warden's own user only:
// it is owned by the process's effective uid, grants nothing to group or
// others, is not a symbolic link, and no directory above it lets another
// user rename it away and put one of their own in its place (each is
// owned by root or by the warden's user, and writable by group or others
// only with the sticky bit, as /tmp and bpffs's /sys/fs/bpf are).
//
// The checks run on the opened descriptor (fstat), not on the name, so a
// path swapped between the check and the use is caught: Dir and File
// return what they checked, open.
package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is what every refusal wraps.
var ErrUnsafe = errors.New("not private to the warden's user")

// UnsafeError says which path failed which check, in words an operator
// can act on.
type UnsafeError struct {
	Path string
	Why  string // "owned by uid 65534 (nobody), not by the warden's uid 0 (root)"
	Fix  string // what to do about it
}

func (e *UnsafeError) Error() string {
	s := e.Path + ": " + e.Why
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

func (e *UnsafeError) Unwrap() error { return ErrUnsafe }

// Dir returns dir opened (O_DIRECTORY, O_NOFOLLOW) after checking that it
// and its ancestors are safe; with create it makes dir (mode 0700, not its
// parents) when missing, and created reports that it did. A dir that does
// not exist without create is fs.ErrNotExist.
func Dir(dir string, create bool) (f *os.File, created bool, err error) {
	return openDir(dir, create, false)
}

// ParentDir is Dir for the directory of a file that is private itself
// (the admin token, mode 0600): others may list it (mode 0755), as long
// as only the warden's user may write in it.
func ParentDir(dir string, create bool) (f *os.File, created bool, err error) {
	return openDir(dir, create, true)
}

func openDir(dir string, create, readable bool) (f *os.File, created bool, err error) {
	dir = filepath.Clean(dir)
	if err := Ancestors(dir); err != nil {
		return nil, false, err
	}
	if create {
		if err := unix.Mkdir(dir, 0o700); err == nil {
			created = true
		} else if !errors.Is(err, unix.EEXIST) {
			return nil, false, &os.PathError{Op: "mkdir", Path: dir, Err: err}
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, false, &UnsafeError{Path: dir, Why: "is not a directory (a symbolic link or a file)", Fix: "remove it"}
		}
		return nil, false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f = os.NewFile(uintptr(fd), dir)
	if err := private(f, true, readable); err != nil {
		f.Close()
		return nil, false, err
	}
	return f, created, nil
}

// File opens an existing file (O_NOFOLLOW) with flag and checks that it is
// a regular file private to the warden's user.
func File(path string, flag int) (*os.File, error) {
	if err := Ancestors(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, &UnsafeError{Path: path, Why: "is a symbolic link", Fix: "remove it"}
		}
		return nil, err
	}
	if err := Private(f, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Private checks an open directory (dir true) or regular file: owned by the
// effective uid, no permission bits for group or others.
func Private(f *os.File, dir bool) error { return private(f, dir, false) }

// private is Private; readable lets group and others read (not write).
func private(f *os.File, dir, readable bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	kind := "a regular file"
	isKind := st.Mode&unix.S_IFMT == unix.S_IFREG
	if dir {
		kind, isKind = "a directory", st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	if !isKind {
		return &UnsafeError{Path: f.Name(), Why: "is not " + kind, Fix: "remove it"}
	}
	me := uint32(os.Geteuid())
	if st.Uid != me {
		return &UnsafeError{Path: f.Name(),
			Why: fmt.Sprintf("owned by uid %s, not by the warden's uid %s: another user made it", who(st.Uid), who(me)),
			Fix: "remove it (it may hold what that user put there) and start the warden again, which makes it itself"}
	}
	others := uint32(0o077)
	if readable {
		others = 0o022
	}
	if perm := st.Mode & 0o777; perm&others != 0 {
		return &UnsafeError{Path: f.Name(),
			Why: fmt.Sprintf("mode %04o lets other users in", perm),
			Fix: fmt.Sprintf("remove it, or chmod %04o it if nothing else could have written there", perm&0o700)}
	}
	return nil
}

// Ancestors checks every directory above path: each must be owned by root
// or by the warden's user, and writable by group or others only with the
// sticky bit (then nobody else may rename or remove what the warden made
// in it). A missing ancestor is fs.ErrNotExist.
func Ancestors(path string) error {
	me := uint32(os.Geteuid())
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return &os.PathError{Op: "stat", Path: d, Err: fs.ErrNotExist}
			}
			return &os.PathError{Op: "stat", Path: d, Err: err}
		}
		if st.Uid != 0 && st.Uid != me {
			return &UnsafeError{Path: d,
				Why: fmt.Sprintf("a directory above it is owned by uid %s, who could replace what the warden keeps there", who(st.Uid)),
				Fix: "keep it under directories owned by root or by the warden's user"}
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return &UnsafeError{Path: d,
				Why: fmt.Sprintf("a directory above it has mode %04o (writable by others, no sticky bit): anyone could rename what the warden keeps there", st.Mode&0o7777),
				Fix: fmt.Sprintf("chmod o-w,g-w %s, or chmod +t it", d)}
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// who names a uid: "65534 (nobody)".
func who(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return s + " (" + u.Username + ")"
	}
	return s
}
