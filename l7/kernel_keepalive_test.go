package l7

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// checksumUpstream answers every request with the SHA-256 of its body,
// then a short SSE stream (64 events, one a millisecond), so a test can check that each
// body crossed the warden intact.
func checksumUpstream(tb testing.TB) string {
	tb.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		fmt.Fprintf(w, "data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(h.Sum(nil)), n)
		f.Flush()
		for i := range 64 {
			time.Sleep(time.Millisecond) // a stream, as a replica's tokens
			fmt.Fprintf(w, "data: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"text\":\"token\"}}\n\n", i)
			f.Flush()
		}
		io.WriteString(w, "data: {\"type\":\"message_stop\"}\n\n")
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestKernelPathCarriesKeepAliveRequestBodies(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	k := mustKernelPath(t)
	up := checksumUpstream(t)
	m := mustModel(t, modelConfig("http://"+up))
	_, addr := mustShim(t, m, Options{Datapath: k})
	c := mustDial(t, addr)
	const requests = 8
	for i := range requests {
		// ~50 KB of JSON, different per request, written with its head.
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` +
			strings.Repeat(fmt.Sprintf("turn %d of a long agent history. ", i), 1500) + `"}]}`
		sum := sha256.Sum256([]byte(body))
		c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\n"+
			"X-Claude-Code-Session-Id: keepalive\r\n"+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body)
		resp, got := c.response(t)
		want := fmt.Sprintf("data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(sum[:]), len(body))
		if resp.StatusCode != 200 || !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "message_stop\"}\n\n") {
			t.Fatalf("request %d: status %d, body %.300q, want it to start with %q", i, resp.StatusCode, got, want)
		}
	}
	kern, user := kernelShare(k)
	share := float64(user) / float64(kern+user)
	t.Logf("kernel %d bytes, userspace %d bytes (%.2f%%); counts %+v", kern, user, 100*share, k.Counts())
	if share >= 0.05 {
		t.Errorf("userspace carried %.1f%% of the bytes of %d keep-alive requests, want under 5%%", 100*share, requests)
	}
	waitInFlight(t, m)
}
