package kernel

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// chunkedHead is the response head the kernel walks before each fuzzed
// chunked body.
const chunkedHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// FuzzChunkedSplits checks, for every way of splitting a chunked body in
// two, that the Go parser (http1.ChunkedBody) and the kernel's (bpf/frame.h,
// run by lmw_reply inside the replica's sendmsg on a real paired socket)
// agree: both find the end at the same byte, or both refuse the body, or
// both wait for more. The replica's end writes the head and the first
// part in one message, the rest in a second.
//
//	go test -run '^$' -fuzz FuzzChunkedSplits ./kernel/   (as root, under unshare -n)
func FuzzChunkedSplits(f *testing.F) {
	for _, seed := range []string{
		"1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
		"0\r\n\r\nGET / HTTP/1.1\r\n",
		"5;name=v\r\nhello\r\n0\r\n\r\n",
		"10 ;e\r\n0123456789abcdef\r\n0\r\n\r\n",
		"000\r\nX-Checksum: abc\r\nx:\r\n\r\n",
		"5\r\nhello\r\n",
		"5\r\nhelloX\r\n", "5\r\nhello\n0\r\n\r\n", "zz\r\n", "10 \r\n", ";e\r\n",
		"1234567890abcdef0\r\n", "0\r\n folded\r\n\r\n", "0\r\nX A: 1\r\n\r\n", "0\r\n\n",
		"5\r\nab\r\n\r\n0\r\n\r\n", "3\r\nab\rc\r\n0\r\n\r\n", "1\r\n\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	if !mapstest.InNetNS(f) {
		// The seed corpus ran, against the kernel, in the namespace.
		f.Fuzz(func(*testing.T, []byte) {})
		return
	}
	w := newFrameWalker(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for i := 0; i <= len(body); i++ {
			goEnd, goErr := goFrameEnd(body, i)
			kEnd, kErr := w.end(t, body, i)
			if goEnd != kEnd || (goErr == nil) != (kErr == nil) {
				t.Fatalf("%q split at %d: Go ends at %d (%v), the kernel at %d (%v)", body, i, goEnd, goErr, kEnd, kErr)
			}
		}
	})
}

// goFrameEnd is where http1.ChunkedBody ends body fed in two parts split at
// i: the offset one past its last byte, -1 if it has not ended, or the
// error of a malformed body.
func goFrameEnd(body []byte, i int) (int, error) {
	var p http1.ChunkedBody
	n, err := p.Feed(body[:i])
	if err != nil || p.Done() {
		return endOrNot(n, err)
	}
	m, err := p.Feed(body[i:])
	if err != nil || p.Done() {
		return endOrNot(i+m, err)
	}
	return -1, nil
}

func endOrNot(n int, err error) (int, error) {
	if err != nil {
		return -1, err
	}
	return n, nil
}

// frameWalker is one replica socket paired in the kernel (lmw_reply runs
// on its sends) and one client socket it redirects to; the far ends of
// both are drained.
type frameWalker struct {
	st     *maps.State
	rs     *net.TCPConn // the replica's end: its writes meet lmw_reply
	cookie uint64       // the warden's end's cookie: the key of the arm
	client uint64       // the client socket's cookie
	gen    uint32
}

func newFrameWalker(tb testing.TB) *frameWalker {
	tb.Helper()
	dir := kerneltest.PinDir(tb)
	p, err := Load(Options{Dir: dir, Mode: maps.ModeMsg})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Close()
		maps.Unload(maps.Options{Dir: dir})
	})
	skipUnpaired(tb, p)
	replica := testnet.Listen(tb, "127.0.0.1:0")
	us, release, err := p.Upstreams.DialTCP(context.Background(), replica.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { us.Close(); release() })
	rs, err := replica.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rs.Close() })
	w := &frameWalker{st: p.State, rs: rs}
	if w.cookie, err = maps.Cookie(us); err != nil {
		tb.Fatal(err)
	}
	if !p.State.Paired(w.cookie) {
		tb.Fatal("the replica's end did not pair")
	}
	if err := p.State.NewSocketState(w.cookie, 0); err != nil {
		tb.Fatal(err)
	}
	front := testnet.Listen(tb, "127.0.0.1:0")
	cli := testnet.Dial(tb, front.Addr().String())
	cs, err := front.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	if w.client, err = maps.Cookie(cs); err != nil {
		tb.Fatal(err)
	}
	if err := p.State.AddClient(cs, w.client); err != nil {
		tb.Fatal(err)
	}
	go io.Copy(io.Discard, cli) // what the kernel carried
	go io.Copy(io.Discard, us)  // what it passed
	return w
}

var errKernelRefused = errors.New("the kernel stopped at malformed framing")

// end arms the replica's socket for one response, writes the head and
// body[:i] in one message and body[i:] in another, waits until lmw_reply
// has seen every byte, and says where the kernel found the body's end.
func (w *frameWalker) end(tb testing.TB, body []byte, i int) (int, error) {
	tb.Helper()
	st, err := w.st.SocketState(w.cookie)
	if err != nil {
		tb.Fatal(err)
	}
	w.gen++
	at := st.Seen
	if err := w.st.Arm(w.cookie, maps.SockCtl{Peer: w.client, ArmAt: at, Credit: 1 << 40, Gen: w.gen, Mode: maps.ModeReply}); err != nil {
		tb.Fatal(err)
	}
	if _, err := w.rs.Write(append([]byte(chunkedHead), body[:i]...)); err != nil {
		tb.Fatal(err)
	}
	if i < len(body) {
		if _, err := w.rs.Write(body[i:]); err != nil {
			tb.Fatal(err)
		}
	}
	want := at + uint64(len(chunkedHead)+len(body))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		if st, err = w.st.SocketState(w.cookie); err != nil {
			tb.Fatal(err)
		}
		if st.Gen == w.gen && st.Seen == want {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("lmw_reply saw %d of %d bytes (gen %d, want %d)", st.Seen-at, want-at, st.Gen, w.gen)
		}
	}
	switch {
	case st.DoneGen == w.gen, st.HaltGen == w.gen && st.HaltWhy == maps.HaltTrailing:
		return int(st.EndAt-at) - len(chunkedHead), nil
	case st.HaltGen == w.gen && st.HaltWhy == maps.HaltFraming:
		return -1, errKernelRefused
	case st.HaltGen == w.gen:
		tb.Fatalf("the kernel stopped carrying for another reason (%d)", st.HaltWhy)
	}
	return -1, nil
}
