package l7_test

import (
	"bufio"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
)

// TestKernelSlowClientLosesNothingAndStallsNobody streams 8 MB, as fast
// as the replica can write it, to a client with a small receive buffer
// that reads 1 KB a tenth of a second for a second, then nothing for two
// seconds, then all of it. Meanwhile a second client's paced stream must
// finish as if alone; the replica (a process of its own) must not spin
// while the first client's socket is full; and every byte must arrive,
// in order (SHA-256). With sk_msg the kernel carries the first part (what
// the client's send buffer can take), then the rest crosses the shim,
// whose writes to the full socket hold the replica back through TCP.
func TestKernelSlowClientLosesNothingAndStallsNobody(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		rp := startReplicaProcess(t)
		m := l7.MustModel(t, l7.ModelConfig("http://"+rp.addr))
		_, addr := l7.MustShim(t, m, kernelOptions(p))

		slow := dialWithReceiveBuffer(t, addr, 64<<10)
		req, want := streamRequest("slow", 2000, 2000, 4096, 0)
		if _, err := io.WriteString(slow, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReaderSize(slow, 1024)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %v err %v", resp, err)
		}
		got := make([]byte, 0, len(want))
		buf := make([]byte, 1024)
		for range 10 { // 1 KB every 100 ms
			n, err := io.ReadFull(resp.Body, buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}

		// Stopped: the replica must be held back, not spinning, and a
		// second client's stream must go on.
		cpu0, at0 := rp.cpu(t), time.Now()
		other := l7.MustDial(t, addr)
		oreq, owant := streamRequest("other", 2000, 64, 100, time.Millisecond)
		other.Send(t, oreq)
		start := time.Now()
		oresp, obody := other.Response(t)
		took := time.Since(start)
		if oresp.StatusCode != 200 || obody != owant {
			t.Fatalf("the other client's stream: status %d, %d bytes of %d", oresp.StatusCode, len(obody), len(owant))
		}
		if took > 5*time.Second { // 64 ms of pacing; a stall would be the slow client's
			t.Errorf("the other client's stream took %v while the slow client stalled", took)
		}
		time.Sleep(2*time.Second - time.Since(at0))
		spun := rp.cpu(t) - cpu0
		t.Logf("replica CPU while the slow client stopped for %v: %v (the other stream included)", time.Since(at0).Round(time.Millisecond), spun)
		if spun > time.Second/2 {
			t.Errorf("the replica used %v of CPU in 2 s while a client stopped reading: it spins", spun)
		}

		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rest...)
		if gs, ws := sha256.Sum256(got), sha256.Sum256([]byte(want)); gs != ws {
			t.Fatalf("the slow client got %d bytes with SHA-256 %x, want %d bytes with %x", len(got), gs[:8], len(want), ws[:8])
		}
		t.Logf("%s: counts %+v", p, kernelCounts(p))
		slow.Close()
		other.Close()
		l7.WaitInFlight(t, m)
		if p.State.Mode() == maps.ModeMsg {
			testutil.Eventually(t, 10*time.Second, "the client sockets to leave lmw_client_socks", func() bool {
				n, _ := p.State.ClientSockets()
				return n == 0
			})
		}
	})
}

// dialWithReceiveBuffer connects to addr with a receive buffer of n bytes
// (set before the handshake, so the window stays that small).
func dialWithReceiveBuffer(tb testing.TB, addr string, n int) net.Conn {
	tb.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, n) })
		return err
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	return c
}
