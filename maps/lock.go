package maps

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockTimeout bounds the wait for the state directory's lock: long
// enough for a warden that is stopping to let go, short enough that a
// start never hangs behind a lock nobody will release.
const DefaultLockTimeout = 5 * time.Second

// dirLock is an flock on the state directory itself (bpffs holds no
// regular files, so the lock is taken on the directory, as tubular does).
// The shared parent (/sys/fs/bpf, mode 1777: anyone may open it) is never
// locked: any local user could hold that lock forever.
type dirLock struct{ f *os.File }

// lockPoll is how often a lock held by someone else is tried again.
const lockPoll = 25 * time.Millisecond

// lockOpen takes an exclusive lock on the open directory f within timeout
// (0: one try). On timeout the error wraps ErrLocked and names the holder
// as /proc/locks shows it: pid, command and uid.
func lockOpen(f *os.File, timeout time.Duration) (*dirLock, error) {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &dirLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%s: %w: held by %s (waited %v)", f.Name(), ErrLocked, lockHolder(f), timeout)
		}
		time.Sleep(lockPoll)
	}
}

func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// lockHolder names the process holding an flock on f: "pid 1234
// (lmwarden, uid 0)", or what can be said when /proc/locks does not show
// it (another PID namespace shows pid 0).
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another process"
	}
	pids := flockHolders(st)
	if len(pids) == 0 {
		return "another process (not in /proc/locks: another PID namespace?)"
	}
	var out []string
	for _, pid := range pids {
		out = append(out, describePID(pid))
	}
	return strings.Join(out, ", ")
}

// flockHolders lists the pids /proc/locks shows holding an flock on the
// inode st (not those waiting for one: their lines start with "->").
func flockHolders(st unix.Stat_t) []int {
	lf, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer lf.Close()
	dev := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var pids []int
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] == "->" || f[1] != "FLOCK" || f[5] != dev {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describePID is "pid 1234 (lmwarden, uid 0)", as much as /proc tells.
func describePID(pid int) string {
	s := "pid " + strconv.Itoa(pid)
	var parts []string
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		parts = append(parts, strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
				parts = append(parts, "uid "+f[1])
			}
		}
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}
