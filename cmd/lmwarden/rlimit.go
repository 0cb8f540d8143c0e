package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/l7"
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

// descriptorsPerConn is the most descriptors one client connection holds
// at once: its socket, a replica connection, and the two ends of the pipe
// the userspace copy splices its body through. (A request waiting for its
// body holds its socket alone: l7/bodywait.go.)
const descriptorsPerConn = 4

// descriptorReserve is kept for everything but client connections: the
// admin API (256 connections), the poller, the pinned maps and programs,
// the logs; pooledPerReplica more for each replica's pooled connections.
const (
	descriptorReserve = 1024
	pooledPerReplica  = 32
)

// maxConnections is the bound on client connections: what the descriptor
// limit carries when every connection holds descriptorsPerConn after the
// reserve, at most 65536; a configured bound above that is lowered to it
// (fits false), since descriptors would run out before the bound refused
// anyone.
func maxConnections(configured int, nofile uint64, replicas int) (n int, fits bool) {
	reserve := uint64(descriptorReserve + pooledPerReplica*replicas)
	carried := 16
	if nofile > reserve+descriptorsPerConn*16 {
		carried = int((nofile - reserve) / descriptorsPerConn)
	}
	if configured > 0 {
		return min(configured, carried), configured <= carried
	}
	return min(carried, 65536), true
}

// connLimits are serve's connection bounds, logged.
func connLimits(cfg *config.Config, nofile uint64, log *slog.Logger) *l7.ConnLimits {
	replicas := 0
	for _, m := range cfg.Models {
		replicas += max(len(m.Replicas), 1)
	}
	n, fits := maxConnections(cfg.MaxConnections, nofile, replicas)
	if !fits {
		log.Warn("max_connections lowered to what the descriptor limit carries", "configured", cfg.MaxConnections, "max_connections", n,
			"descriptor_limit", nofile, "why", fmt.Sprintf("a busy connection holds up to %d descriptors; raise LimitNOFILE= (systemd) or ulimit -n", descriptorsPerConn))
	}
	limits := l7.NewConnLimits(n, cfg.MaxConnectionsPerClient)
	log.Info("connection bounds", "max_connections", limits.Max(), "max_connections_per_client", limits.PerClient(), "descriptor_limit", nofile)
	return limits
}
