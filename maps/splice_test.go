package maps

import (
	"bufio"
	"io"
	"testing"
	"time"
)

func TestSpliceCarriesBodyAndStreamInKernel(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	front, sh := mustShim(t, s, []string{mustUpstream(t, 0)})
	c := mustDial(t, front)
	body := payload(1 << 20)
	request(t, c, bufio.NewReader(c), "/sse", "s-0", body, nil)
	c.Close()
	time.Sleep(50 * time.Millisecond)
	sh.check(t)
	st, err := s.Stats(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	total := st.BytesKernel + st.BytesUser
	if st.BytesKernel < 1<<20 {
		t.Errorf("kernel carried %d bytes, want at least the 1 MiB body", st.BytesKernel)
	}
	if float64(st.BytesUser) > 0.05*float64(total) {
		t.Errorf("userspace saw %d of %d bytes (over 5%%)", st.BytesUser, total)
	}
	if st.Requests != 1 || st.Responses != 1 {
		t.Errorf("requests %d responses %d, want 1 and 1", st.Requests, st.Responses)
	}
}

func TestSpliceKeepsOrderAcrossHandoff(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	front, sh := mustShim(t, s, []string{mustUpstream(t, 0)})
	c := mustDial(t, front)
	body := payload(1 << 20)
	slow := func(w io.Writer, b []byte) error {
		const pieces = 1000
		step := (len(b) + pieces - 1) / pieces
		for i := 0; i < len(b); i += step {
			if _, err := w.Write(b[i:min(i+step, len(b))]); err != nil {
				return err
			}
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	}
	request(t, c, bufio.NewReader(c), "/sse", "s-0", body, slow)
	sh.check(t)
}

func TestKeepAliveRoutesEachRequestAfresh(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	front, sh := mustShim(t, s, []string{mustUpstream(t, 0), mustUpstream(t, 1)})
	c := mustDial(t, front)
	br := bufio.NewReader(c)
	// route(): last byte of the session id modulo 2
	got := []int{
		request(t, c, br, "/sse", "sess-a", payload(50<<10), nil), // 'a'=97 -> 1
		request(t, c, br, "/cl", "sess-b", payload(50<<10), nil),  // 'b'=98 -> 0
		request(t, c, br, "/sse", "sess-a", payload(70<<10), nil),
	}
	want := []int{1, 0, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d answered by replica %d, want %d", i, got[i], want[i])
		}
	}
	sh.check(t)
}
