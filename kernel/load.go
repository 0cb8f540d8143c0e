package kernel

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// Path is a loaded kernel datapath with what the rest of the daemon needs
// of it: the pinned state, the dialers of the warden's own connections
// (registered, so that the dispatch program never steers them back into
// the shim), and its metrics.
type Path struct {
	datapath.Datapath
	State     *maps.State
	Upstreams *OwnDialer // connections to replicas (paired for the sk_msg datapath)
	Polls     *OwnDialer // the metrics poller's
	Collector prometheus.Collector
	close     func() error
}

// Options of Load.
type Options struct {
	Dir  string    // pinned state (maps.DefaultDir if empty)
	Mode maps.Mode // maps.ModeMsg or maps.ModeSkb
	// Cgroup is the cgroup v2 directory lmw_pair attaches to (ModeMsg):
	// the hierarchy's root if empty, so that every replica on the host is
	// seen; a replica outside it does not pair and its responses cross
	// userspace (logged once per replica).
	Cgroup string
	// ConnectTimeout bounds each connect of the warden's own (3 s if 0).
	ConnectTimeout time.Duration
	Log            *slog.Logger
}

// Load loads (or adopts) the pinned state in opts.Mode and returns that
// datapath over it. An error says why it cannot run here (it wraps
// maps.ErrUnsupported or maps.ErrLocked).
func Load(opts Options) (*Path, error) {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 3 * time.Second
	}
	st, err := maps.Load(maps.Options{Dir: opts.Dir, Mode: opts.Mode, Cgroup: opts.Cgroup})
	if err != nil {
		return nil, err
	}
	p := &Path{State: st, Polls: NewOwnDialer(st, opts.ConnectTimeout, false)}
	switch opts.Mode {
	case maps.ModeMsg:
		k := NewMsgPath(st, opts.Log)
		p.Datapath, p.Collector, p.close = k, k.Collector(), k.Close
		p.Upstreams = NewOwnDialer(st, opts.ConnectTimeout, true)
	default:
		k := NewSkbPath(st)
		p.Datapath, p.Collector, p.close = k, k.Collector(), k.Close
		p.Upstreams = NewOwnDialer(st, opts.ConnectTimeout, false)
	}
	return p, nil
}

// Close stops the datapath's background work and releases this process's
// handles; everything stays pinned (with the shims' listeners closed,
// sk_lookup fails open, and a restarted warden adopts the state).
func (p *Path) Close() error {
	return errors.Join(p.close(), p.State.Close())
}

// String names the datapath and its kernel programs, for logs and status.
func (p *Path) String() string {
	if p.State.Mode() == maps.ModeMsg {
		return fmt.Sprintf("msg (sk_msg + sock_ops on %s, sk_lookup)", cgroupOrUnknown())
	}
	return "skb (sk_skb stream verdict, sk_lookup)"
}

func cgroupOrUnknown() string {
	if cg, err := maps.CgroupRoot(); err == nil {
		return cg
	}
	return "cgroup v2"
}
