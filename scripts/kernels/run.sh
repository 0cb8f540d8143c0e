#!/usr/bin/env bash
# `make kernels`: the kernel datapaths' tests on the kernels users run, one
# QEMU VM per Debian kernel (docs/kernel.md, "Kernels tested").
#
# For each kernel it downloads Debian's package through a private apt
# state under $OUT/apt (its own sources list, lists and cache: the
# system's apt sources and state are left alone), unpacks it with
# `dpkg -x` (nothing goes into the host's /boot), boots it under QEMU with
# a busybox initramfs holding static test binaries (CGO_ENABLED=0) and
# init.sh, and reads what the tests print from the serial console. Then it
# prints a table: kernel, what `--datapath auto` chose and why, tests
# passed / failed / skipped, wall time.
#
# Knobs (environment):
#   KERNEL_SUITES  Debian suites whose cloud kernel (linux-image-cloud-amd64)
#                  runs, default "bookworm-security bookworm-backports trixie
#                  trixie-backports"; or
#   KERNEL_PKGS    exact image packages (linux-image-6.12.95+deb12-cloud-amd64 ...),
#                  from those suites, instead of the suites' newest
#   KERNEL_TESTS   which tests: "all" (default: kernel/, maps/, the l7
#                  kernel tests and the shim suite over each kernel
#                  datapath, cmd's datapath, fail-open, restart and
#                  self-test tests), "quick" (the self-tests, kernel/ and
#                  the self-test and fallback tests: what CI runs), or
#                  "PKG:REGEXP" pairs (e.g. "l7:TestKernelCarriesBody") for one
#                  test while debugging
#   KERNEL_SMP     virtual CPUs per VM (2), KERNEL_MEM (3G)
#   KERNEL_TIMEOUT bound of one VM run in seconds (2400), KERNEL_TEST_TIMEOUT
#                  of one test binary in it (20m)
#   KERNEL_PLAN_EXTRA shell the VM runs after the tests (debugging)
#   KERNEL_BUILD=0 reuses the binaries of the last run (while debugging)
#   OUT            where everything goes (out/kernels)
# Needs root only to install what is missing (qemu-system-x86,
# busybox-static, cpio): nothing it runs needs privileges on the host.
# The whole script is one block, read before it runs: editing the file
# while a run goes on (an hour) does not change that run.
{
# No `writer | head` or `writer | grep -q` below: under pipefail the
# writer's SIGPIPE, when the reader exits first, fails them at random.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/kernels}
SUITES=${KERNEL_SUITES:-"bookworm-security bookworm-backports trixie trixie-backports"}
TESTS=${KERNEL_TESTS:-all}
SMP=${KERNEL_SMP:-2}
MEM=${KERNEL_MEM:-3G}
VMTIMEOUT=${KERNEL_TIMEOUT:-2400}
TESTTIMEOUT=${KERNEL_TEST_TIMEOUT:-20m}
GO=${GO:-go}
mkdir -p "$OUT"

# datapath NAME CONSOLE: what `lmwarden selftest --datapath NAME` said in
# the VM: "passes", "fails its self-test", "does not load".
datapath() {
	local line
	line=$(grep -m1 "^LMW-DP $1 " "$2" || true)
	case $line in
	*"rc=0 "*) echo "passes" ;;
	*"self-test:"*) echo "loads, fails its self-test" ;;
	"") echo "?" ;;
	*) echo "does not load" ;;
	esac
}

# row ABI SECS: the table's row for the run in $OUT/ABI (its console).
row() {
	local abi=$1 secs=$2 c=$OUT/$1/console.txt auto pass=0 fail=0 skip=0
	auto=$(sed -n '/^LMW-AUTO-BEGIN/,/^LMW-AUTO-END/{s/^auto: //p}' "$c")
	auto=${auto%%$'\n'*}
	while read -r _ _ _ p f s _; do
		pass=$((pass + ${p#pass=})) fail=$((fail + ${f#fail=})) skip=$((skip + ${s#skip=}))
	done < <(grep '^LMW-RESULT' "$c" || true)
	grep -q '^LMW-END' "$c" || { fail=$((fail + 1)); auto="${auto:-?} (the VM did not finish: see $c)"; }
	echo "| $abi | $(datapath msg "$c") | $(datapath skb "$c") | ${auto:-?} | $pass | $fail | $skip | $((secs / 60))m$((secs % 60))s |"
}

table() {
	echo "| kernel | msg | skb | auto chose (why) | passed | failed | skipped | wall |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "$@"
}

failed=0
if [ "${1:-}" = --table ]; then
	# The table again from the consoles of the last runs (wall times
	# from their secs file).
	rows=()
	for c in "$OUT"/*/console.txt; do
		abi=$(basename "$(dirname "$c")")
		rows+=("$(row "$abi" "$(cat "$OUT/$abi/secs" 2>/dev/null || echo 0)")")
	done
	table "${rows[@]}"
	exit 0
fi

# What the runs need, installed like scripts/deps.sh does: only what is
# missing.
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
{ [ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -x insmod >/dev/null; } || need+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "kernels: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "kernels: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The private apt state: Debian's own archive, only the suites that ship
# kernels we run, and a status file of its own.
APT=$OUT/apt
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/etc"
: >"$APT/status"
{
	for s in $SUITES; do
		case $s in
		*-security) echo "deb http://deb.debian.org/debian-security $s main" ;;
		*) echo "deb http://deb.debian.org/debian $s main" ;;
		esac
	done
} >"$APT/etc/sources.list.new"
aptopts=(-o "Dir::Etc::SourceList=$APT/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "Dir::State::status=$APT/status"
	-o APT::Sandbox::User=root -o Debug::NoLocking=1 -o Acquire::Retries=3)
if ! cmp -s "$APT/etc/sources.list.new" "$APT/etc/sources.list" 2>/dev/null ||
	[ -z "$(find "$APT/lists" -name '*Packages*' -mmin -720 -print -quit 2>/dev/null)" ]; then
	mv "$APT/etc/sources.list.new" "$APT/etc/sources.list"
	echo "kernels: apt-get update (private state in $APT)"
	apt-get "${aptopts[@]}" update -qq
fi
rm -f "$APT/etc/sources.list.new"

# pkgs: the image package of each suite's cloud kernel, or KERNEL_PKGS.
pkgs=()
if [ -n "${KERNEL_PKGS:-}" ]; then
	read -r -a pkgs <<<"$KERNEL_PKGS"
else
	for s in $SUITES; do
		v=$(apt-cache "${aptopts[@]}" -o "APT::Default-Release=$s" policy linux-image-cloud-amd64 | awk '/Candidate:/ {print $2}')
		meta=$(apt-cache "${aptopts[@]}" show "linux-image-cloud-amd64=$v")
		p=$(sed -n 's/^Depends:.*\(linux-image-[^ ]*-cloud-amd64\) .*/\1/p' <<<"$meta")
		p=${p%%$'\n'*}
		[ -n "$p" ] || { echo "kernels: no cloud kernel in $s" >&2; exit 1; }
		pkgs+=("$p")
	done
fi

# unpack PKG: vmlinuz and the modules the tests need (veth), extracted
# with dpkg -x under $OUT/debs. Newer packagings keep the kernel and
# the modules in linux-binary-* and linux-modules-*.
unpack() {
	local pkg=$1 abi dir
	abi=${pkg#linux-image-}
	dir=$OUT/debs/$abi
	if [ ! -e "$dir/ok" ]; then
		rm -rf "$dir"
		mkdir -p "$dir/dl" "$dir/x"
		local extra=() meta
		# Read the record whole first: `apt-cache show | grep -q` fails
		# under pipefail whenever grep exits before apt-cache has written
		# everything (SIGPIPE), which left 7.3.4's kernel out at random.
		meta=$(apt-cache "${aptopts[@]}" show "$pkg")
		if grep -q "linux-binary-$abi" <<<"$meta"; then
			extra=("linux-binary-$abi" "linux-modules-$abi")
		fi
		(cd "$dir/dl" && apt-get "${aptopts[@]}" download -qq "$pkg" "${extra[@]}")
		for d in "$dir"/dl/*.deb; do dpkg -x "$d" "$dir/x"; done
		rm -rf "$dir/dl"
		# Only a kernel that unpacked whole is kept for the next run.
		if ls "$dir"/x/boot/vmlinuz-* "$dir"/x/usr/lib/modules/*/vmlinuz >/dev/null 2>&1; then
			touch "$dir/ok"
		fi
	fi
	echo "$dir/x"
}

# The test binaries, static (the initramfs has no libc), and the warden.
BIN=$OUT/bin
mkdir -p "$BIN"
if [ "${KERNEL_BUILD:-1}" != 0 ] || [ ! -e "$BIN/lmwarden" ]; then
	echo "kernels: building static test binaries"
	for p in kernel maps l7; do
		CGO_ENABLED=0 $GO test -c -o "$BIN/$p.test" "./$p/"
	done
	CGO_ENABLED=0 $GO test -c -o "$BIN/cmd.test" ./cmd/lmwarden/
	CGO_ENABLED=0 $GO build -o "$BIN/lmwarden" ./cmd/lmwarden/
fi

# plan.sh: what init.sh runs. Each test binary's whole output goes to a
# file in the VM; the console gets its result lines, and all of it when it
# failed. LMW-RESULT lines are what the table counts.
plan() {
	local runs=()
	case $TESTS in
	all)
		runs=("kernel:." "maps:." "l7:Kernel"
			"cmd:TestServeRunsTheKernelDatapathItSays|TestServeOneEndpointFailsOpen|TestServeKernelRestart|TestSelftest|TestAutoFallsBack|TestMsgFallsBack")
		;;
	quick) runs=("kernel:." "cmd:TestSelftest|TestAutoFallsBack|TestMsgFallsBack") ;;
	*) read -r -a runs <<<"$TESTS" ;;
	esac
	cat <<'EOF'
export LMWARDEN_REQUIRE_BPF=1 LMWARDEN_SERVE_BIN=/bin/lmwarden LMWARDEN_SUITE_TIMEOUT=15m
echo "LMW-AUTO-BEGIN"
/bin/lmwarden selftest --datapath auto 2>&1
echo "LMW-AUTO-END $?"
for m in msg skb; do
	/bin/lmwarden selftest --datapath $m > /tmp/selftest-$m.log 2>&1
	echo "LMW-DP $m rc=$? $(tail -1 /tmp/selftest-$m.log)"
done
EOF
	for r in "${runs[@]}"; do
		local pkg=${r%%:*} re=${r#*:} dir
		dir=$pkg
		[ "$pkg" = cmd ] && dir=cmd/lmwarden
		cat <<EOF
echo "LMW-RUN $pkg $re"
cd /src/$dir
t0=\$(date +%s)
/bin/$pkg.test -test.v -test.count=1 -test.timeout $TESTTIMEOUT -test.run '$re' > /tmp/$pkg.log 2>&1
rc=\$?
cd /
grep -E '^(    )?--- (PASS|FAIL|SKIP)' /tmp/$pkg.log
[ \$rc -ne 0 ] && cat /tmp/$pkg.log
echo "LMW-RESULT $pkg rc=\$rc pass=\$(grep -cE '^(    )?--- PASS' /tmp/$pkg.log) fail=\$(grep -cE '^(    )?--- FAIL' /tmp/$pkg.log) skip=\$(grep -cE '^(    )?--- SKIP' /tmp/$pkg.log) secs=\$((\$(date +%s)-t0))"
EOF
	done
	# KERNEL_PLAN_EXTRA: shell run in the VM after the tests (while
	# debugging: cat /sys/kernel/tracing/trace, say).
	echo "${KERNEL_PLAN_EXTRA:-}"
}

# initramfs DIR X: busybox, setpriv (TestMinimalCapabilities) with its
# libraries, the binaries, veth, init.sh and plan.sh, as a cpio archive.
initramfs() {
	local x=$1 img=$2 root
	root=$(mktemp -d "$OUT/root.XXXXXX")
	chmod 0755 "$root" # the VM's /: mktemp's 0700 would keep nobody out
	mkdir -p "$root"/{bin,sbin,etc,lib/modules,root,proc,sys,dev,tmp,run}
	cp /bin/busybox "$root/bin/busybox"
	cp "$BIN"/* "$root/bin/"
	local sp
	sp=$(command -v setpriv)
	mkdir -p "$root/usr/bin"
	cp "$sp" "$root/usr/bin/setpriv"
	for lib in $(ldd "$sp" | grep -o '/[^ ]*'); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
	for m in veth; do
		local ko
		ko=$(find "$x/lib/modules" "$x/usr/lib/modules" -name "$m.ko*" 2>/dev/null | head -1 || true)
		[ -n "$ko" ] || continue
		case $ko in
		*.xz) xz -dc "$ko" >"$root/lib/modules/$m.ko" ;;
		*.zst) zstd -qdc "$ko" >"$root/lib/modules/$m.ko" ;;
		*) cp "$ko" "$root/lib/modules/$m.ko" ;;
		esac
	done
	# The docs some tests read (the metrics they export are documented),
	# where the tests find them: ../docs from their package's directory.
	mkdir -p "$root/src/kernel" "$root/src/maps" "$root/src/l7" "$root/src/cmd/lmwarden"
	cp -r docs README.md "$root/src/"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	echo 'nobody:x:65534:65534:nobody:/:/bin/false' >>"$root/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
	cp scripts/kernels/init.sh "$root/init"
	chmod 0755 "$root/init"
	plan >"$root/plan.sh"
	(cd "$root" && find . | cpio -o -H newc --quiet) >"$img"
	rm -rf "$root"
}

# boot X IMG LOG: one VM, software emulation (KVM does not run these
# guests here); Debian's QEMU 7.2 needs la57 and cx16 off for them. The
# serial console is the only output.
boot() {
	local x=$1 img=$2 log=$3 vmlinuz rc=0
	vmlinuz=$(ls "$x"/boot/vmlinuz-* "$x"/usr/lib/modules/*/vmlinuz 2>/dev/null | head -1 || true)
	if [ -z "$vmlinuz" ]; then
		echo "kernels: no vmlinuz under $x (the package's layout changed?)" >"$log.qemu"
		: >"$log"
		return
	fi
	timeout --foreground -k 10 "$VMTIMEOUT" qemu-system-x86_64 -machine q35 -accel tcg,thread=multi \
		-cpu max,-la57,-cx16 -smp "$SMP" -m "$MEM" -nographic -no-reboot \
		-kernel "$vmlinuz" -initrd "$img" -nic none \
		-append "console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off" \
		-serial "file:$log" -monitor none -display none </dev/null >"$log.qemu" 2>&1 || rc=$?
	echo "qemu exit status $rc" >>"$log.qemu"
}

# unfinished RUN ABI: say why a VM did not finish where CI's log shows
# it: QEMU's own output and the end of the console (a panic, say).
unfinished() {
	local run=$1 abi=$2
	grep -q '^LMW-END' "$run/console.txt" && return
	echo "kernels: $abi: the VM did not finish; QEMU said:"
	sed "s/^/kernels: $abi:   /" "$run/console.log.qemu" 2>/dev/null || true
	echo "kernels: $abi: the console's last lines:"
	tail -25 "$run/console.txt" | sed "s/^/kernels: $abi:   /"
}

rows=()
total0=$(date +%s)
for pkg in "${pkgs[@]}"; do
	abi=${pkg#linux-image-}
	abi=${abi%-cloud-amd64}
	x=$(unpack "$pkg")
	run=$OUT/$abi
	mkdir -p "$run"
	echo "kernels: $abi: booting (console log: $run/console.log)"
	initramfs "$x" "$run/initramfs.cpio"
	t0=$(date +%s)
	boot "$x" "$run/initramfs.cpio" "$run/console.log"
	tr -d '\r' <"$run/console.log" >"$run/console.txt"
	# A VM that never reached its tests (no LMW-RUN line: QEMU or the
	# boot failed, as once in CI after 7 s with no trace kept) boots
	# once more; a test that ran and failed is never run again.
	if ! grep -q '^LMW-RUN' "$run/console.txt"; then
		unfinished "$run" "$abi"
		echo "kernels: $abi: the VM never reached its tests; booting it once more"
		boot "$x" "$run/initramfs.cpio" "$run/console.log"
		tr -d '\r' <"$run/console.log" >"$run/console.txt"
	fi
	secs=$(($(date +%s) - t0))
	echo "$secs" >"$run/secs"
	rm -f "$run/initramfs.cpio"
	unfinished "$run" "$abi"
	r=$(row "$abi" "$secs")
	rows+=("$r")
	failed=$((failed + $(echo "$r" | awk -F'|' '{print $7 + 0}')))
	grep '^LMW-RESULT' "$run/console.txt" | sed "s/^/kernels: $abi: /" || true
done
echo
echo "make kernels ($TESTS), $(nproc) host cores, ${SMP} vCPUs per VM, software emulation; $(($(date +%s) - total0)) s in all"
echo
table "${rows[@]}" | tee "$OUT/table.md"
echo
printf '%s\n' "${rows[@]}" | awk -F'|' '{p += $6; f += $7; s += $8} END {printf "kernels: %d passed, %d failed, %d skipped\n", p, f, s}'
[ "$failed" -eq 0 ]
exit
}
