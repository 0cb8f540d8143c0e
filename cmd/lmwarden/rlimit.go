package main

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// raiseNoFile lets serve hold as many descriptors as the host allows: the
// kernel's nr_open where the warden may raise its hard limit
// (CAP_SYS_RESOURCE, root), else its hard limit (the Go runtime raises
// the soft one to it as well; this says so, and what it got). Every client
// connection costs one descriptor and may need a replica connection too,
// so the limit also sizes max_connections when the config leaves it at 0.
func raiseNoFile(log *slog.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("descriptor limit unknown", "err", err)
		return 1024
	}
	before := lim.Cur
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				log.Info("descriptor limit raised", "from", before, "to", n, "to_hard_limit_of", "nr_open")
				return n
			}
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("descriptor limit not raised", "limit", before, "hard_limit", lim.Max, "err", err)
			return before
		}
	}
	log.Info("descriptor limit", "limit", lim.Cur, "why_not_higher", "the hard limit (raising it needs CAP_SYS_RESOURCE; LimitNOFILE= in a systemd unit)")
	return lim.Cur
}

// maxConnections is the bound on client connections: the config's, or
// half of the descriptors left after a reserve for the admin API, the
// poller, the pinned maps and the logs, at most 65536.
func maxConnections(configured int, nofile uint64) int {
	if configured > 0 {
		return configured
	}
	const reserve = 1024
	n := 64
	if nofile > reserve+2*64 {
		n = int((nofile - reserve) / 2)
	}
	return min(n, 65536)
}
