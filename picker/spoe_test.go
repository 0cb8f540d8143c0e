package picker

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// The varint of SPOP, at the edges of its lengths (doc/SPOE.txt's table).
func TestSPOEVarint(t *testing.T) {
	for _, c := range []struct {
		v uint64
		b []byte
	}{
		{0, []byte{0}}, {239, []byte{239}}, {240, []byte{0xf0, 0}}, {2287, []byte{0xff, 0x7f}},
		{2288, []byte{0xf0, 0x80, 0}}, {264431, []byte{0xff, 0xff, 0x7f}}, {264432, []byte{0xf0, 0x80, 0x80, 0}},
	} {
		if got := appendVarint(nil, c.v); !bytes.Equal(got, c.b) {
			t.Errorf("encode %d = % x, want % x", c.v, got, c.b)
		}
		v, rest, err := readVarint(append(c.b, 0xaa))
		if err != nil || v != c.v || len(rest) != 1 {
			t.Errorf("decode % x = %d %v (rest %d)", c.b, v, err, len(rest))
		}
	}
	for v := uint64(0); v < 1<<22; v += 997 {
		got, _, err := readVarint(appendVarint(nil, v))
		if err != nil || got != v {
			t.Fatalf("round trip %d = %d %v", v, got, err)
		}
	}
	if _, _, err := readVarint([]byte{0xf0, 0x80}); err == nil {
		t.Error("a truncated varint decoded")
	}
}

// A whole SPOP exchange over TCP as HAProxy runs it: HELLO, a NOTIFY with
// the pick message, its ACK with the endpoint and the ticket, a NOTIFY
// with the done message, DISCONNECT. (The deploy/haproxy test runs the
// same agent behind a real HAProxy.)
func TestSPOEExchange(t *testing.T) {
	r := testRegistry(t, Config{})
	r.setLoadForTest(0, HostLoad{Serving: true, Replicas: 1, Ready: 1})
	r.setLoadForTest(1, HostLoad{Serving: true, Replicas: 1, Ready: 1, Running: 3})
	a := NewSPOEAgent(r, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go a.Serve(ctx, ln)
	defer func() { cancel(); a.Close() }()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)

	var hello []byte
	hello = appendKV(hello, "supported-versions", spoeString, "2.0", 0)
	hello = appendKV(hello, "max-frame-size", spoeUint32, "", 16380)
	hello = appendKV(hello, "capabilities", spoeString, "pipelining", 0)
	hello = appendKV(hello, "engine-id", spoeString, "test", 0)
	if err := writeSPOEFrame(bw, spoeHaproxyHello, 0, 0, hello); err != nil {
		t.Fatal(err)
	}
	ah := mustFrame(t, br, spoeAgentHello)
	if ah.kvs["version"].s != "2.0" || ah.kvs["max-frame-size"].n != 16380 {
		t.Errorf("agent hello %+v", ah.kvs)
	}

	var msg []byte
	msg = appendString(msg, SPOEPickMessage)
	msg = append(msg, 2)
	msg = appendKV(msg, "x-session-id", spoeString, "conv-1", 0)
	msg = appendKV(msg, "content-length", spoeString, "4000", 0)
	if err := writeSPOEFrame(bw, spoeNotify, 7, 1, msg); err != nil {
		t.Fatal(err)
	}
	vars := mustAck(t, br, 7, 1)
	if vars["endpoint"].s != "192.0.2.1:8000" || vars["ticket"].n == 0 {
		t.Fatalf("ack vars %+v", vars)
	}
	if n := r.Model().Status().InFlight; n != 1 {
		t.Errorf("in flight %d after the pick", n)
	}

	msg = appendString(nil, SPOEDoneMessage)
	msg = append(msg, 2)
	msg = appendKV(msg, "ticket", spoeUint64, "", vars["ticket"].n)
	msg = appendKV(msg, "served", spoeString, "192.0.2.2:8000", 0)
	if err := writeSPOEFrame(bw, spoeNotify, 7, 2, msg); err != nil {
		t.Fatal(err)
	}
	mustAck(t, br, 7, 2)
	st := r.Model().Status()
	if st.InFlight != 0 {
		t.Errorf("in flight %d after done", st.InFlight)
	}
	if st.Replicas[1].Sessions != 1 {
		t.Errorf("the conversation did not follow the host that served it: %+v", st.Replicas)
	}

	var bye []byte
	bye = appendKV(bye, "status-code", spoeUint32, "", 0)
	bye = appendKV(bye, "message", spoeString, "normal", 0)
	if err := writeSPOEFrame(bw, spoeHaproxyDisconnect, 0, 0, bye); err != nil {
		t.Fatal(err)
	}
	mustFrame(t, br, spoeAgentDisconnect)
}

// A health check hello is answered and the connection ends.
func TestSPOEHealthcheck(t *testing.T) {
	r := testRegistry(t, Config{})
	a := NewSPOEAgent(r, nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	go a.Serve(ctx, ln)
	defer func() { cancel(); a.Close() }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	var hello []byte
	hello = appendKV(hello, "supported-versions", spoeString, "2.0", 0)
	hello = appendKV(hello, "max-frame-size", spoeUint32, "", 1024)
	hello = appendKV(hello, "capabilities", spoeString, "", 0)
	hello = append(appendString(hello, "healthcheck"), spoeBool|0x10)
	writeSPOEFrame(bw, spoeHaproxyHello, 0, 0, hello)
	if f := mustFrame(t, br, spoeAgentHello); f.kvs["max-frame-size"].n != 1024 {
		t.Errorf("max-frame-size %d, want HAProxy's 1024", f.kvs["max-frame-size"].n)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the connection stayed open after a health check")
	}
}

func mustFrame(t *testing.T, br *bufio.Reader, typ byte) *spoeFrame {
	t.Helper()
	f, err := readSPOEFrame(br, spoeMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != typ {
		t.Fatalf("frame type %d, want %d", f.typ, typ)
	}
	if f.flags&spoeFlagFin == 0 {
		t.Error("FIN not set")
	}
	if err := f.decodeKVs(); err != nil && typ != spoeAck {
		t.Fatal(err)
	}
	return f
}

// mustAck reads an ACK and its set-var actions.
func mustAck(t *testing.T, br *bufio.Reader, stream, frame uint64) map[string]spoeValue {
	t.Helper()
	f, err := readSPOEFrame(br, spoeMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != spoeAck || f.stream != stream || f.frame != frame {
		t.Fatalf("frame %d stream %d id %d, want ACK %d %d", f.typ, f.stream, f.frame, stream, frame)
	}
	vars := map[string]spoeValue{}
	p := f.payload
	for len(p) > 0 {
		if len(p) < 3 || p[0] != spoeSetVar || p[1] != 3 || p[2] != spoeScopeTxn {
			t.Fatalf("action % x", p)
		}
		name, rest, err := readString(p[3:])
		if err != nil {
			t.Fatal(err)
		}
		v, rest, err := readTyped(rest)
		if err != nil {
			t.Fatal(err)
		}
		vars[name], p = v, rest
	}
	return vars
}
