package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lmwarden/lmwarden/internal/safefs"
)

// The admin token's file (admin_token_file): one line, 64 hex digits,
// readable by the warden's user only. The warden makes it on its first
// start and reads it on every later one, so clients that keep it (the
// bench, a dashboard tab) keep working across restarts; an operator may
// write one of their own (at least 32 characters, mode 0600).

// minTokenLen is the shortest token a file may hold.
const minTokenLen = 32

// DefaultAdminTokenFile is where the token is when admin_token_file is not
// set: /run/lmwarden/admin.token for root, and for the user that owns
// /run/lmwarden (the systemd unit's RuntimeDirectory); else under
// $XDG_RUNTIME_DIR, else under the temporary directory, per user.
func DefaultAdminTokenFile() string {
	const run = "/run/lmwarden"
	if os.Geteuid() == 0 {
		return filepath.Join(run, "admin.token")
	}
	if fi, err := os.Stat(run); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
			return filepath.Join(run, "admin.token")
		}
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "lmwarden", "admin.token")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("lmwarden-%d", os.Geteuid()), "admin.token")
}

// LoadAdminToken returns the token in path, first making the file (mode
// 0600, a fresh random token) and its directory (mode 0700, not its
// parents) when they are missing. Both must be the warden's own: a file
// another user made or may read, or a directory another user made or may
// write in, is refused (they might know the token in it, or replace it).
func LoadAdminToken(path string) (string, error) {
	dir, _, err := safefs.ParentDir(filepath.Dir(path), true)
	if err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	dir.Close()
	for range 3 {
		f, err := safefs.File(path, os.O_RDONLY)
		if err == nil {
			defer f.Close()
			return readToken(f, path)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("admin token: %w", err)
		}
		if err := writeToken(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("admin token %s: %w", path, err)
		}
		// Made now (or by another warden at the same moment): read it.
	}
	return "", fmt.Errorf("admin token %s: the file keeps changing", path)
}

// writeToken makes path with a new token, never over an existing file.
func writeToken(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin.token.") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.WriteString(tmp, newToken()+"\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp.Name(), path) // fails with ErrExist if one is there
}

func readToken(r io.Reader, path string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minTokenLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("admin token %s: want one line of at least %d characters (remove the file: the warden makes a new one)", path, minTokenLen)
	}
	if strings.Count(tok, tok[:1]) == len(tok) {
		return "", fmt.Errorf("admin token %s: a placeholder (one character repeated): put a token of your own there (openssl rand -hex 32), or remove the file and the warden makes one", path)
	}
	return tok, nil
}

// ReadAdminToken reads the token as a client does (lmwarden bench): the
// user who runs it must be able to read the file (the warden's user, or
// root).
func ReadAdminToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "", fmt.Errorf("admin token: %w (admin writes need the warden's token: run as the warden's user or root, or pass the file with --admin-token-file)", err)
		}
		return "", fmt.Errorf("admin token: %w", err)
	}
	defer f.Close()
	return readToken(f, path)
}
