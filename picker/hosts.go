package picker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Host is one GPU host as the picker knows it: the address the gateway
// sends its requests to (the host warden's frontend) and where that
// warden's admin API answers.
type Host struct {
	// Endpoint is ip:port, the form the endpoint picker protocol names
	// endpoints in (x-gateway-destination-endpoint); an IPv6 address is
	// bracketed ("[fd00::1]:8000").
	Endpoint string
	// Admin is the base URL of the host warden's admin API
	// ("http://10.0.0.7:9100"), read for the host's load and health.
	Admin string
}

// DefaultAdminPort is where a host's admin API is looked for when a host is
// given by its endpoint alone: the same address, this port.
const DefaultAdminPort = 9100

// ErrBadHost is a host description that cannot be used.
var ErrBadHost = errors.New("bad host")

// ParseHost reads "IP:PORT" (the admin API on the same IP at adminPort) or
// "IP:PORT=ADMIN_URL". The endpoint must be an IP literal: the gateway is
// told an address, never a name it would have to resolve.
func ParseHost(s string, adminPort int) (Host, error) {
	ep, admin, hasAdmin := strings.Cut(strings.TrimSpace(s), "=")
	ap, err := netip.ParseAddrPort(ep)
	if err != nil {
		return Host{}, fmt.Errorf("%w %q: the endpoint must be ip:port (an IP address, not a name; IPv6 in brackets): %v", ErrBadHost, s, err)
	}
	if ap.Port() == 0 {
		return Host{}, fmt.Errorf("%w %q: port 0", ErrBadHost, s)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	h := Host{Endpoint: ap.String()}
	if !hasAdmin {
		if adminPort <= 0 || adminPort > 65535 {
			return Host{}, fmt.Errorf("%w %q: admin port %d", ErrBadHost, s, adminPort)
		}
		h.Admin = "http://" + net.JoinHostPort(ap.Addr().String(), strconv.Itoa(adminPort))
		return h, nil
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return Host{}, fmt.Errorf("%w %q: the admin API must be a base URL such as http://10.0.0.7:9100", ErrBadHost, s)
	}
	h.Admin = strings.TrimRight(admin, "/")
	return h, nil
}

// ParseHosts reads a list of host descriptions (ParseHost) and refuses
// duplicated endpoints.
func ParseHosts(list []string, adminPort int) ([]Host, error) {
	var out []Host
	seen := map[string]bool{}
	var errs []error
	for _, s := range list {
		h, err := ParseHost(s, adminPort)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[h.Endpoint] {
			errs = append(errs, fmt.Errorf("%w %q: endpoint %s given twice", ErrBadHost, s, h.Endpoint))
			continue
		}
		seen[h.Endpoint] = true
		out = append(out, h)
	}
	return out, errors.Join(errs...)
}

// normalEndpoint puts an ip:port the gateway reports (served endpoint,
// subset hint) in the form Host.Endpoint has, so that they compare equal;
// a value that is not ip:port is returned as is.
func normalEndpoint(s string) string {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
	if err != nil {
		return strings.TrimSpace(s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
