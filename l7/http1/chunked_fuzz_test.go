package http1

import (
	"bytes"
	"io"
	"net/http/httputil"
	"testing"
)

// FuzzChunkedBody feeds a chunked body to the parser whole and in pieces
// of every size the fuzzer picks: both must stop at the same byte with
// the same verdict, and a body the parser accepts as whole must carry the
// data Go's own chunked reader decodes from it (the parser may be
// stricter, never looser or different). The corpus it found is kept in
// testdata/fuzz/FuzzChunkedBody and replayed by every `go test`.
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{
		"0\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\n",
		"a;ext=1\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
		"1\r\nx\r\n1 \r\ny\r\n0\r\n\r\nGET / HTTP/1.1\r\n",
		"ffffffffffffffffff\r\n",
		"5\nhello\n0\n\n",
		"3\r\nab",
	} {
		f.Add(uint8(3), []byte(s))
	}
	f.Fuzz(func(t *testing.T, piece uint8, in []byte) {
		var whole ChunkedBody
		n1, err1 := whole.Feed(in)

		var split ChunkedBody
		size := int(piece%16) + 1
		n2, err2 := 0, error(nil)
		for n2 < len(in) && err2 == nil && !split.Done() {
			end := min(n2+size, len(in))
			k, err := split.Feed(in[n2:end])
			n2 += k
			err2 = err
			if k < end-(n2-k) && err == nil && !split.Done() {
				t.Fatalf("Feed stopped at %d of a piece without an end or an error", k)
			}
		}
		if n1 != n2 || (err1 == nil) != (err2 == nil) || whole != split {
			t.Fatalf("whole: n %d err %v %+v; in pieces of %d: n %d err %v %+v", n1, err1, whole, size, n2, err2, split)
		}
		if err1 != nil || !whole.Done() {
			return
		}
		// Accepted whole: the data must be what Go's reader decodes.
		var ours bytes.Buffer
		var p ChunkedBody
		for b := in[:n1]; len(b) > 0; {
			k, data, err := p.Next(b)
			if err != nil {
				t.Fatalf("Next: %v after Feed accepted the body", err)
			}
			if data {
				ours.Write(b[:k])
			}
			b = b[k:]
		}
		theirs, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in[:n1])))
		if err != nil {
			t.Fatalf("the parser accepted %q, Go's chunked reader refuses it: %v", in[:n1], err)
		}
		if !bytes.Equal(ours.Bytes(), theirs) {
			t.Fatalf("data %q, Go's chunked reader decodes %q", ours.Bytes(), theirs)
		}
	})
}
