package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
)

// kernelDatapath is a kernel datapath with its pinned state.
type kernelDatapath struct {
	st    *maps.State
	path  *kernel.Path
	proof selfTestProof // what its self-test found
}

// loadKernelDatapath loads (or adopts) the pinned BPF state at pinDir
// (maps.DefaultDir when empty) for the datapath mode.
func loadKernelDatapath(pinDir string, mode maps.Mode, log *slog.Logger) (*kernelDatapath, error) {
	p, err := kernel.Load(kernel.Options{Dir: pinDir, Mode: mode, Log: log})
	switch {
	case errors.Is(err, maps.ErrLocked):
		return nil, fmt.Errorf("%w (another warden holds it, or one is still shutting down)", err)
	case errors.Is(err, maps.ErrUnsafe):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w (%s)", err, kernelNeeds[mode])
	}
	how := "created"
	if p.State.Reused {
		how = "adopted"
	}
	log.Info("kernel datapath", "state", p.State.Dir(), "pinned", how)
	if old := p.State.OlderAttach(); len(old) > 0 {
		log.Info("kernel datapath: no bpf_link for these attach types on this kernel; attached with BPF_PROG_ATTACH, which lasts as long as the pinned map", "programs", old)
	}
	return &kernelDatapath{st: p.State, path: p}, nil
}

// kernelNeeds is what each kernel datapath needs, as measured
// (docs/kernel.md, "Requirements (as measured)").
var kernelNeeds = map[maps.Mode]string{
	maps.ModeMsg: "needs root or CAP_BPF+CAP_NET_ADMIN, bpffs at /sys/fs/bpf, a cgroup v2 mount, kernel >= 6.1 with BTF",
	maps.ModeSkb: "needs root or CAP_BPF+CAP_NET_ADMIN+CAP_PERFMON, bpffs at /sys/fs/bpf, kernel >= 6.1 with BTF",
}

// listenFrontend opens the listener of a model's shim: an ephemeral
// loopback port that sk_lookup steers the frontend {address, port} to, so
// vLLM may keep listening on that port itself and answers again the moment
// the warden stops (fail-open); a frontend address that is not local yet
// is added to lo (and removed by `lmwarden unload`).
func (k *kernelDatapath) listenFrontend(addr string) (*net.TCPListener, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	ap := ta.AddrPort()
	if ap.Port() == 0 {
		return l7.Listen(addr) // nothing to steer: an ephemeral frontend
	}
	if !ap.Addr().IsValid() {
		ap = netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port())
	}
	local := "127.0.0.1:0"
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		local = "[::1]:0"
	}
	ln, err := l7.Listen(local)
	if err != nil {
		return nil, err
	}
	if err := k.st.AddFrontend(ap, ln, true); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// sessionSink mirrors every model's sessions into the pinned map
// (agent.Options.Sink); each entry carries its model's index in the config.
func (k *kernelDatapath) sessionSink(cfg *config.Config) func(config.ModelConfig) placement.SessionSink {
	return func(mc config.ModelConfig) placement.SessionSink {
		for i := range cfg.Models {
			if cfg.Models[i].Name == mc.Name {
				return maps.SessionSink{S: k.st, Model: uint32(i)}
			}
		}
		return maps.SessionSink{S: k.st}
	}
}

// hashKey makes the session hash survive a restart: without a configured
// hash_key, the key is the one kept in the pinned state (made the first
// time), so the sessions map's keys stay valid for the next warden.
func (k *kernelDatapath) hashKey(cfg *config.Config) error {
	if cfg.HashKey != nil {
		return nil
	}
	key, err := k.st.HashKey()
	if err != nil {
		return fmt.Errorf("session hash key: %w", err)
	}
	cfg.HashKey = key
	return nil
}

// restoreSessions puts the sessions of a previous warden, read from the
// pinned map, back into the models, so each conversation returns to the
// replica that holds its cache. It returns how many were restored.
func (k *kernelDatapath) restoreSessions(w *agent.Warden, now time.Time) (int, error) {
	if !k.st.Reused {
		return 0, nil
	}
	models := w.Models()
	n := 0
	err := k.st.Sessions(func(h uint64, v maps.Session) bool {
		i := int(v.Model)
		if i < len(models) && models[i].RestoreSession(h, int(v.Replica), time.Unix(0, int64(v.LastSeenNs)), now) {
			n++
		}
		return true
	})
	return n, err
}

// close releases the kernel state at shutdown. Everything stays pinned:
// with the shims' listeners closed, sk_lookup fails open, and a restarted
// warden adopts the state (sessions included).
func (k *kernelDatapath) close() error { return k.path.Close() }
