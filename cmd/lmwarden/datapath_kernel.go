package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
)

// loadKernelDatapath loads (or adopts) the pinned BPF state at
// /sys/fs/bpf/lmwarden and returns the kernel datapath over it; closeFn
// releases this process's handles (the state stays pinned).
func loadKernelDatapath(cfg *agent.Config, log *slog.Logger) (l7.Datapath, func() error, error) {
	st, err := maps.Load(maps.Options{})
	switch {
	case errors.Is(err, maps.ErrLocked):
		return nil, nil, fmt.Errorf("%w (another warden holds it, or one is still shutting down)", err)
	case err != nil:
		return nil, nil, fmt.Errorf("%w (needs root or CAP_BPF+CAP_NET_ADMIN+CAP_PERFMON, bpffs at /sys/fs/bpf, kernel >= 6.10 with BTF)", err)
	}
	how := "created"
	if st.Reused {
		how = "adopted"
	}
	log.Info("kernel datapath", "state", st.Dir(), "pinned", how)
	k := l7.NewKernelPath(st)
	return k, func() error { return kernelCloseDatapath(k) }, nil
}

// listenFrontend opens the listener a model's shim serves. With the kernel
// datapath the shim listens on an ephemeral loopback port and sk_lookup
// steers the frontend {address, port} to it, so vLLM may keep listening on
// that port itself and answers again the moment the warden stops
// (fail-open); a frontend address that is not local yet is added to lo
// (and removed by `lmwarden unload`). Otherwise it listens on addr itself.
func listenFrontend(dp l7.Datapath, addr string) (*net.TCPListener, error) {
	k, ok := dp.(*l7.KernelPath)
	if !ok {
		return l7.Listen(addr)
	}
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
	if err := k.State().AddFrontend(ap, ln, true); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// datapathSessionSink mirrors every model's sessions into the pinned map
// when the kernel datapath runs (agent.Options.Sink); each entry carries
// its model's index in the config.
func datapathSessionSink(dp l7.Datapath, cfg *agent.Config) func(agent.ModelConfig) agent.SessionSink {
	k, ok := dp.(*l7.KernelPath)
	if !ok {
		return nil
	}
	return func(mc agent.ModelConfig) agent.SessionSink {
		for i := range cfg.Models {
			if cfg.Models[i].Name == mc.Name {
				return maps.SessionSink{S: k.State(), Model: uint16(i)}
			}
		}
		return maps.SessionSink{S: k.State()}
	}
}

// kernelHashKey makes the session hash survive a restart: without a
// configured hash_key, the key is the one kept in the pinned state (made
// the first time), so the sessions map's keys stay valid for the next
// warden. A configured key is used as is.
func kernelHashKey(dp l7.Datapath, cfg *agent.Config) error {
	k, ok := dp.(*l7.KernelPath)
	if !ok || cfg.HashKey != nil {
		return nil
	}
	key, err := k.State().HashKey()
	if err != nil {
		return fmt.Errorf("session hash key: %w", err)
	}
	cfg.HashKey = key
	return nil
}

// restoreSessions puts the sessions of a previous warden, read from the
// pinned map, back into the models, so each conversation returns to the
// replica that holds its cache. It returns how many were restored.
func restoreSessions(dp l7.Datapath, w *agent.Warden, now time.Time) (int, error) {
	k, ok := dp.(*l7.KernelPath)
	if !ok || !k.State().Reused {
		return 0, nil
	}
	models := w.Models()
	n := 0
	err := k.State().Sessions(func(h uint64, v maps.Session) bool {
		i := int(v.Flags >> maps.SessionModelShift)
		if i < len(models) && models[i].RestoreSession(h, int(v.Replica), time.Unix(0, int64(v.LastSeenNs)), now) {
			n++
		}
		return true
	})
	return n, err
}

// kernelCloseDatapath releases the kernel state at shutdown. Everything
// stays pinned: with the shims' listeners closed, sk_lookup fails open,
// and a restarted warden adopts the state (sessions included).
func kernelCloseDatapath(k *l7.KernelPath) error {
	return errors.Join(k.Close(), k.State().Close())
}
