package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/lmwarden/lmwarden/agent/config"
)

// checkNoLoop refuses a configuration in which a replica's address is one
// of the warden's own frontends, for the userspace datapath: its shim
// listens on the frontend itself, so it would be sent its own requests,
// and each would be forwarded to itself again. (The kernel datapath serves
// that layout, the one that fails open to vLLM's own listener: its
// dispatch program never steers the warden's own connections.)
func checkNoLoop(cfg *config.Config) error {
	ctx := context.Background()
	type front struct {
		ap    netip.AddrPort
		model string
	}
	var fronts []front
	for _, m := range cfg.Models {
		host, port, err := net.SplitHostPort(m.Frontend)
		if err != nil {
			continue // Validate has said what is wrong with it
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		addrs := []netip.Addr{netip.IPv4Unspecified()}
		if host != "" {
			if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
				continue
			}
		}
		for _, a := range addrs {
			fronts = append(fronts, front{netip.AddrPortFrom(a.Unmap(), uint16(p)), m.Name})
		}
	}
	check := func(field, raw string) error {
		for _, ap := range urlAddrs(ctx, raw) {
			for _, f := range fronts {
				same := f.ap == ap || (f.ap.Port() == ap.Port() && f.ap.Addr().IsUnspecified() && isLocalAddr(ap.Addr()))
				if same {
					return fmt.Errorf("%w: %s %s is the frontend %s of model %s: the userspace datapath listens there itself and would send the warden's requests to itself (a loop); serve this layout with --datapath kernel (it never steers the warden's own connections, and the frontend fails open to that replica's listener), or give the frontend another port",
						config.ErrInvalidConfig, field, raw, f.ap, f.model)
				}
			}
		}
		return nil
	}
	for i, m := range cfg.Models {
		if m.OneEndpoint() {
			if err := check(fmt.Sprintf("models[%d].endpoint", i), m.Endpoint); err != nil {
				return err
			}
			continue
		}
		for j, r := range m.Replicas {
			if err := check(fmt.Sprintf("models[%d].replicas[%d]", i, j), r); err != nil {
				return err
			}
		}
	}
	return nil
}

// urlAddrs resolves a replica URL's host and port (80 or 443 by scheme).
func urlAddrs(ctx context.Context, raw string) []netip.AddrPort {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(p)))
	}
	return out
}

// isLocalAddr reports whether a is an address of this host (a wildcard
// frontend listens on it).
func isLocalAddr(a netip.Addr) bool {
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, x := range addrs {
		if n, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}
