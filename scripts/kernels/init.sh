#!/bin/busybox sh
# /init of the VMs `make kernels` boots (scripts/kernels/run.sh builds the
# initramfs around it): a busybox userland, the static test binaries, the
# kernel's own veth module. It mounts what the BPF tests need (proc, sys,
# bpffs, cgroup v2, tracefs), runs /plan.sh (the tests, written by run.sh)
# and powers the machine off. Everything it says goes to the serial
# console, which the host reads: the cloud kernels have no 9p to share a
# directory with.
/bin/busybox --install -s /bin
# /usr/bin first: the real setpriv (util-linux) is there, busybox has a
# smaller one in /bin.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
# bpffs traversable by every user, as on the machines make test runs on
# (TestMinimalCapabilities runs the datapath as nobody under it).
mount -t bpf -o mode=1777 bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
for m in /lib/modules/*.ko; do
	[ -e "$m" ] && insmod "$m"
done
ip link set lo up
hostname lmwarden-vm
export HOME=/root TMPDIR=/tmp
echo "LMW-KERNEL $(uname -r)"
. /plan.sh
echo "LMW-END"
sync
poweroff -f
