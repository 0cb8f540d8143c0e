package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lmwarden/lmwarden/agent/config"
)

// The kernel datapath takes a frontend's new connections in the kernel
// (sk_lookup) before any listener sees them, so the warden never binds the
// frontend's port: a process listening there keeps its socket but gets no
// more connections, and nothing says so. That is the point where the
// listener is the model's own replica (the one-endpoint layout that fails
// open to vLLM's own listener, docs/kernel.md); anywhere else it silently
// steals another service's clients. So serve refuses, at start, a frontend
// whose port a process other than the model's replicas listens on, naming
// it, unless the model says frontend_takeover: true.

// errFrontendTaken: another service listens on a frontend's port.
var errFrontendTaken = errors.New("another process listens on the frontend's port")

// checkFrontendTakeover refuses (with the kernel datapath) every model
// whose frontend port another service listens on.
func checkFrontendTakeover(cfg *config.Config) error {
	ls, err := tcpListeners()
	if err != nil {
		return fmt.Errorf("frontend check: reading this network namespace's listening sockets: %w", err)
	}
	var errs []error
	for i, m := range cfg.Models {
		if m.FrontendTakeover {
			continue
		}
		front, err := netip.ParseAddrPort(m.Frontend)
		if err != nil {
			ta, rerr := net.ResolveTCPAddr("tcp", m.Frontend)
			if rerr != nil {
				continue // the config's own check names it
			}
			front = ta.AddrPort()
		}
		if front.Port() == 0 {
			continue
		}
		for _, l := range ls {
			if !covers(front, l.addr) || replicaListener(m, l.addr) {
				continue
			}
			errs = append(errs, fmt.Errorf("models[%d] %s: frontend %s: %w: %s (%s); the kernel datapath would give its new connections to the warden. "+
				"Give the frontend another port, or set frontend_takeover: true on the model to take them over on purpose",
				i, m.Name, m.Frontend, errFrontendTaken, l.addr, l.owner()))
		}
	}
	return errors.Join(errs...)
}

// covers reports whether connections to frontend would reach a listener
// on addr: the same port, and one of the two addresses the other or the
// wildcard (sk_lookup steers a wildcard frontend's port on every address).
func covers(frontend, addr netip.AddrPort) bool {
	if frontend.Port() != addr.Port() {
		return false
	}
	f, a := frontend.Addr().Unmap(), addr.Addr().Unmap()
	return !f.IsValid() || f.IsUnspecified() || a.IsUnspecified() || f == a
}

// replicaListener reports whether a listener on addr is one of the model's
// replicas (or its endpoint): the listener the layout fails open to.
func replicaListener(m config.ModelConfig, addr netip.AddrPort) bool {
	urls := m.Replicas
	if m.Endpoint != "" {
		urls = []string{m.Endpoint}
	}
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			continue
		}
		port := pu.Port()
		if port == "" {
			port = map[string]string{"https": "443"}[pu.Scheme]
			if port == "" {
				port = "80"
			}
		}
		if port != strconv.Itoa(int(addr.Port())) {
			continue
		}
		ips, err := net.LookupIP(pu.Hostname())
		if err != nil {
			continue
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip); ok && covers(netip.AddrPortFrom(a.Unmap(), addr.Port()), addr) {
				return true
			}
		}
	}
	return false
}

// listener is a listening TCP socket of this network namespace.
type listener struct {
	addr  netip.AddrPort
	uid   int
	inode string
}

// owner names the process that holds the socket, when this process may
// see it (root, or the same user), else its user.
func (l listener) owner() string {
	if pid, name := socketProcess(l.inode); pid != "" {
		return fmt.Sprintf("pid %s (%s), uid %d", pid, name, l.uid)
	}
	return fmt.Sprintf("uid %d, socket inode %s", l.uid, l.inode)
}

// tcpListeners reads the listening sockets of the namespace from
// /proc/net/tcp and tcp6.
func tcpListeners() ([]listener, error) {
	var out []listener
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ls, err := readListeners(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// tcpListen is the LISTEN state in /proc/net/tcp.
const tcpListen = "0A"

func readListeners(path string) ([]listener, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []listener
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != tcpListen {
			continue
		}
		ap, err := procAddr(fs[1])
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(fs[7])
		out = append(out, listener{addr: ap, uid: uid, inode: fs[9]})
	}
	return out, sc.Err()
}

// procAddr reads an address of /proc/net/tcp: the address in hex, 32-bit
// words in host (little-endian) order, then the port in hex.
func procAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}

// socketProcess finds the process holding socket inode ("" when none this
// process may see).
func socketProcess(inode string) (pid, name string) {
	target := "socket:[" + inode + "]"
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && l == target {
				pid = filepath.Base(filepath.Dir(fdDir))
				comm, _ := os.ReadFile(filepath.Join(filepath.Dir(fdDir), "comm"))
				return pid, strings.TrimSpace(string(comm))
			}
		}
	}
	return "", ""
}
