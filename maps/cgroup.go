package maps

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// CgroupRoot returns the mount point of the cgroup v2 hierarchy, read from
// /proc/self/mountinfo: /sys/fs/cgroup on most hosts, /sys/fs/cgroup/unified
// on hybrid ones. lmw_pair attached there sees the sockets of every process
// in the hierarchy (under a cgroup namespace: of that namespace's part).
func CgroupRoot() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 0:30 / /sys/fs/cgroup rw,... shared:9 - cgroup2 cgroup2 rw"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if !ok || len(fields) < 5 || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		return unescapeMount(fields[4]), nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: no cgroup v2 mount (the sk_msg datapath attaches sock_ops to it)", ErrUnsupported)
}

// unescapeMount undoes mountinfo's octal escapes (\040 is a space).
func unescapeMount(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			var c byte
			if _, err := fmt.Sscanf(p[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
