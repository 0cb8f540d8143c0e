package http1

import (
	"errors"
	"strings"
	"testing"
)

// feedSplit runs a fresh parser over body in two parts, split at i, and
// returns where the body ended (-1: not within body) or that it is
// malformed.
func feedSplit(body string, i int) (end int, err error) {
	var p ChunkedBody
	n, err := p.Feed([]byte(body[:i]))
	if err != nil {
		return -1, err
	}
	if p.Done() {
		return n, nil
	}
	m, err := p.Feed([]byte(body[i:]))
	if err != nil {
		return -1, err
	}
	if p.Done() {
		return i + m, nil
	}
	return -1, nil
}

func TestChunkedBodyEndsWhereTheFramingSays(t *testing.T) {
	data := strings.Repeat("d", 26)
	for body, want := range map[string]int{
		"1a\r\n" + data + "\r\n0\r\n\r\n":                            4 + 26 + 2 + 5,
		"0\r\n\r\nGET / HTTP/1.1\r\n":                                5,
		"FF;name=v\r\n" + strings.Repeat("x", 255) + "\r\n0\r\n\r\n": 11 + 255 + 2 + 5,
		"10 ;e\r\n0123456789abcdef\r\n0\r\n\r\n":                     7 + 16 + 2 + 5,
		"000\r\nX-Checksum: abc\r\nx:\r\n\r\n":                       5 + 17 + 4 + 2,
		"5\r\nhello\r\n":                                             -1, // not ended yet
	} {
		for i := 0; i <= len(body); i++ {
			if end, err := feedSplit(body, i); err != nil || end != want {
				t.Errorf("%q split at %d: end %d err %v, want %d", body, i, end, err, want)
			}
		}
	}
}

func TestChunkedBodyRefusesWhatTwoParsersCouldReadDifferently(t *testing.T) {
	for _, body := range []string{
		"\r\n", "zz\r\n", "1a\n", "-1\r\n", "1234567890abcdef0\r\n", "0x10\r\n", "10 \r\n",
		"5;a\rb\r\n", "5;a\x00\r\n", ";e\r\n", " 5\r\n",
		"5\r\nhelloX\r\n", "5\r\nhello\n0\r\n\r\n",
		"0\r\n\n", "0\r\nX-A: 1\n\r\n", "0\r\n folded\r\n\r\n", "0\r\nno colon\r\n\r\n",
		"0\r\nX-A: a\rb\r\n\r\n", "0\r\nX A: 1\r\n\r\n", "0\r\n: v\r\n\r\n",
		"5;" + strings.Repeat("e", MaxChunkLine) + "\r\n",
		"0\r\nX: " + strings.Repeat("v", MaxChunkLine) + "\r\n\r\n",
		"0\r\n" + strings.Repeat("X-Long: "+strings.Repeat("v", 1000)+"\r\n", MaxHeadBytes/1000) + "\r\n",
	} {
		for i := 0; i <= len(body); i++ {
			if end, err := feedSplit(body, i); !errors.Is(err, ErrBadChunk) {
				t.Errorf("%.40q split at %d: end %d err %v, want errBadChunk", body, i, end, err)
				break
			}
		}
	}
}

func TestChunkedBodyNextSeparatesDataFromFraming(t *testing.T) {
	var p ChunkedBody
	in := []byte("3\r\nabc\r\n2;x\r\nde\r\n0\r\nT: 1\r\n\r\nrest")
	var data, framing string
	for !p.Done() {
		n, isData, err := p.Next(in)
		if err != nil {
			t.Fatal(err)
		}
		if isData {
			data += string(in[:n])
		} else {
			framing += string(in[:n])
		}
		in = in[n:]
	}
	if data != "abcde" || framing != "3\r\n\r\n2;x\r\n\r\n0\r\nT: 1\r\n\r\n" || string(in) != "rest" {
		t.Fatalf("data %q framing %q rest %q", data, framing, in)
	}
}
