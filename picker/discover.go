package picker

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// Discovery finds the hosts by resolving a DNS name, such as a Kubernetes
// headless Service over the warden DaemonSet's pods: every address it
// resolves to is a host, its warden's frontend at Port and its admin API
// at AdminPort. The name is resolved again every Interval; an answer that
// differs from the current list replaces it (Registry.SetHosts), and a
// failed or empty lookup keeps the list as it is (a DNS hiccup must not
// take every host away; a host that really left stops answering its polls
// and is taken out by them).
type Discovery struct {
	Name      string
	Port      int
	AdminPort int
	Interval  time.Duration
	// Resolver resolves Name (nil: the system's).
	Resolver *net.Resolver
}

// DefaultDiscoveryInterval is how often the hosts' DNS name is resolved.
const DefaultDiscoveryInterval = 10 * time.Second

func (d *Discovery) timeout() time.Duration { return 5 * time.Second }

// Lookup resolves the name once: the hosts, in address order.
func (d *Discovery) Lookup(ctx context.Context) ([]Host, error) {
	res := d.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, "ip", d.Name)
	if err != nil {
		return nil, fmt.Errorf("hosts from DNS %s: %w", d.Name, err)
	}
	seen := map[netip.Addr]bool{}
	var hosts []Host
	for _, a := range addrs {
		a = a.Unmap()
		if seen[a] {
			continue
		}
		seen[a] = true
		h, err := ParseHost(net.JoinHostPort(a.String(), strconv.Itoa(d.Port)), d.AdminPort)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("hosts from DNS %s: no address", d.Name)
	}
	slices.SortFunc(hosts, func(a, b Host) int {
		return netip.MustParseAddrPort(a.Endpoint).Compare(netip.MustParseAddrPort(b.Endpoint))
	})
	return hosts, nil
}

// run keeps reg's host list equal to what the name resolves to.
func (d *Discovery) run(ctx context.Context, reg *Registry) {
	every := d.Interval
	if every <= 0 {
		every = DefaultDiscoveryInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, d.timeout())
		hosts, err := d.Lookup(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				reg.log.Warn("host discovery failed; keeping the hosts as they are", "err", err)
			}
			continue
		}
		if err := reg.SetHosts(hosts); err != nil {
			reg.log.Warn("host discovery", "err", err)
		}
	}
}
