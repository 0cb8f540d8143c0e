package kernel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

const (
	capsModeEnv = "LMWARDEN_CAPS_MODE"
	capsDirEnv  = "LMWARDEN_CAPS_DIR"
)

// TestMinimalCapabilities proves which capabilities each kernel datapath
// needs: the test binary runs again as the unprivileged user nobody with
// only the capabilities of each set (setpriv), loads the datapath into a
// directory made for it (as the systemd unit makes /sys/fs/bpf/lmwarden),
// and steers a connection through it (TestCapabilityProbe). sk_msg needs
// CAP_BPF and CAP_NET_ADMIN; sk_skb also CAP_PERFMON (its verdict reads
// the socket's read position through BTF); neither needs CAP_SYS_ADMIN.
func TestMinimalCapabilities(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed: %v", err)
	}
	// A copy of this binary nobody may run, in a directory nobody may
	// enter.
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("lmwarden-caps-%d", os.Getpid()))
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "kernel.test")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mode maps.Mode
		caps string
		ok   bool
	}{
		{maps.ModeMsg, "bpf,net_admin", true},
		{maps.ModeMsg, "bpf", false},
		{maps.ModeMsg, "net_admin", false},
		{maps.ModeSkb, "bpf,net_admin,perfmon", true},
		{maps.ModeSkb, "bpf,net_admin", false},
	}
	unpaired := msgUnpaired(t)
	for _, c := range cases {
		t.Run(string(c.mode)+" "+c.caps, func(t *testing.T) {
			if c.mode == maps.ModeMsg && unpaired != nil {
				t.Skipf("msg on this kernel: %v; its self-test refuses it (docs/kernel.md, \"Kernels tested\")", unpaired)
			}
			capsCase(t, exe, bin, setpriv, c.mode, c.caps, c.ok)
		})
	}
}

// capsCase runs TestCapabilityProbe as nobody with caps, over a pinned
// state directory made for it, and checks that mode works with them as ok
// says.
func capsCase(t *testing.T, exe, bin, setpriv string, mode maps.Mode, caps string, ok bool) {
	dir := kerneltest.PinDir(t)
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil { // as /sys/fs/bpf is
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	set := "-all,+" + strings.ReplaceAll(caps, ",", ",+")
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set,
		exe, "-test.run", "^TestCapabilityProbe$", "-test.v")
	cmd.Dir = bin
	cmd.Env = append(os.Environ(), capsModeEnv+"="+string(mode), capsDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	passed := err == nil && strings.Contains(string(out), "--- PASS: TestCapabilityProbe")
	if !passed && ok && strings.Contains(string(out), "attempt to corrupt spilled pointer on stack") {
		// 6.1's verifier refuses, without CAP_PERFMON, a write over
		// part of a spilled pointer's stack slot that later ones
		// allow: there the datapath needs CAP_PERFMON too (the
		// unit grants it), and auto says why without it.
		t.Logf("%s with %s: this kernel's verifier wants CAP_PERFMON too (attempt to corrupt spilled pointer on stack)", mode, caps)
	} else if passed != ok {
		t.Errorf("%s with %s: works %v, want %v:\n%s", mode, caps, passed, ok, out)
	} else {
		t.Logf("%s with %s: works %v", mode, caps, passed)
	}
	if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
		t.Error(err)
	}
}

// msgUnpaired loads msg, with every privilege, over fresh pinned state
// and returns ProbePairing's ErrUnpaired where this kernel does not pair
// its connections (nil where it does); another failure fails the test.
func msgUnpaired(t *testing.T) error {
	dir := kerneltest.PinDir(t)
	p, err := Load(Options{Dir: dir, Mode: maps.ModeMsg})
	if err != nil {
		t.Fatal(err)
	}
	defer maps.Unload(maps.Options{Dir: dir})
	defer p.Close()
	err = p.ProbePairing()
	if err != nil && !errors.Is(err, ErrUnpaired) {
		t.Fatal(err)
	}
	return err
}

// TestCapabilityProbe is what TestMinimalCapabilities runs with fewer
// privileges: load the datapath, steer a connection to a shim listener
// through sk_lookup, and make the datapath's own socket step happen
// (sk_msg: the replica's end of an upstream connection pairs; sk_skb: a
// socket joins the SOCKHASH).
func TestCapabilityProbe(t *testing.T) {
	mode, dir := os.Getenv(capsModeEnv), os.Getenv(capsDirEnv)
	if mode == "" {
		t.Skip("run by TestMinimalCapabilities")
	}
	p, err := Load(Options{Dir: dir, Mode: maps.Mode(mode)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	replica := testnet.Listen(t, "127.0.0.1:0")
	shim := testnet.Listen(t, "127.0.0.1:0")
	front := replica.Addr().(*net.TCPAddr).AddrPort()
	if err := p.State.AddFrontend(front, shim, false); err != nil {
		t.Fatal(err)
	}
	if got := acceptedBy(t, testnet.Dial(t, front.String()), replica, shim); got != 1 {
		t.Fatalf("a client's connection went to listener %d, want the shim's", got)
	}
	up, release, err := p.Upstreams.DialTCP(context.Background(), front.String())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer up.Close()
	replica.SetDeadline(time.Now().Add(5 * time.Second))
	acc, err := replica.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	cookie, err := maps.Cookie(up)
	if err != nil {
		t.Fatal(err)
	}
	if p.State.Mode() == maps.ModeMsg {
		testutil.Eventually(t, 10*time.Second, "the replica's end to pair", func() bool { return p.State.Paired(cookie) })
		return
	}
	if err := p.State.Arm(cookie, maps.SockCtl{Mode: maps.ModePass}); err != nil {
		t.Fatal(err)
	}
	if err := p.State.AddSocket(up, cookie, 0); err != nil {
		t.Fatal(err)
	}
	io.WriteString(acc, "x")
	if _, err := io.ReadFull(up, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}
