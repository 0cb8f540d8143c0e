package agent

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// peerUID finds the local user that owns the client socket at remote (a
// client of the admin API on this host): the kernel lists every TCP socket
// of the network namespace with its owner in /proc/net/tcp and tcp6, by
// its local address, which is the admin connection's remote one. It is
// read for admin writes only, so the log says which user changed what.
func peerUID(remote string) (int, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil || !ap.Addr().IsLoopback() {
		return 0, false
	}
	file, want := "/proc/net/tcp", procAddr(ap)
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		file = "/proc/net/tcp6"
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || !strings.EqualFold(fields[1], want) {
			continue
		}
		uid, err := strconv.Atoi(fields[7])
		return uid, err == nil
	}
	return 0, false
}

// procAddr writes an address the way /proc/net/tcp does: the address's
// 32-bit words in host (little-endian) order, in hex, then the port.
func procAddr(ap netip.AddrPort) string {
	a := ap.Addr().Unmap()
	var b strings.Builder
	raw := a.AsSlice()
	for i := 0; i+4 <= len(raw); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.LittleEndian.Uint32(raw[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", ap.Port())
	return b.String()
}
