package kernel

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// bpf2go carries the C structs and enums to Go, not the #defines: the
// flags, reasons and bounds below are typed twice, in bpf/*.h and in Go.
// goDefines is every #define of the headers the Go side reads, with the
// Go constant that must equal it.
var goDefines = map[string]uint64{
	"LMW_MAX_REPLICAS":    maxSlots,
	"FRONTEND_OWN_ADDR":   maps.FrontendOwnAddr,
	"OWN_PAIR":            maps.OwnPair,
	"LMW_MAX_LINE":        http1.MaxChunkLine,
	"LMW_MAX_TRAILERS":    http1.MaxHeadBytes,
	"CTL_NO_BODY":         maps.CtlNoBody,
	"CTL_TAIL_PASS":       maps.CtlTailPass,
	"CTL_REARM":           maps.CtlRearm,
	"CTL_NOTIFY":          maps.CtlNotify,
	"CTL_HANDOFF":         maps.CtlHandoff,
	"CTL_FAULT_CARRY_END": maps.CtlFaultCarryEnd,
	"HALT_HEAD":           maps.HaltHead,
	"HALT_CREDIT":         maps.HaltCredit,
	"HALT_FRAMING":        maps.HaltFraming,
	"HALT_PEER":           maps.HaltPeer,
	"HALT_PULL":           maps.HaltPull,
	"HALT_HANDOFF":        maps.HaltHandoff,
	"HALT_TRAILING":       maps.HaltTrailing,
	"HF_LENGTH":           maps.HeadLength,
	"HF_CHUNKED":          maps.HeadChunked,
	"LMW_MAX_HEAD":        maps.MaxHead,
	"END_FRAMED":          maps.EndFramed,
	"END_BODY":            maps.EndBody,
	"LMW_MAX_FIELDS":      http1.MaxHeaderLines,
}

// cOnly are the #defines no Go code reads: map sizes (Go asks the loaded
// map), and the programs' own parser states and socket flags.
var cOnly = map[string]bool{
	"LMW_MAX_FRONTENDS": true, "LMW_MAX_SESSIONS": true, "LMW_MAX_SOCKETS": true, "LMW_MAX_OWN_CONNS": true,
	"HF_CONNECTION": true, "SF_TAIL_SPLIT": true, "SF_BROKEN": true,
	"F_MORE": true, "F_END": true, "F_BAD": true,
	"HS_STATUS": true, "HS_REASON": true, "HS_STATUS_LF": true, "HS_LINE": true,
	"HS_NAME": true, "HS_VALUE": true, "HS_LF": true, "HS_END_LF": true,
	"FIELD_OTHER": true, "FIELD_LENGTH": true, "FIELD_CHUNKED": true, "FIELD_CONNECTION": true,
}

var defineRE = regexp.MustCompile(`^#define\s+(\w+)\s+(\S+)`)

// cDefines returns the numeric #defines of the bpf/ headers by name
// (include guards, which have no value, are left out).
func cDefines(t *testing.T) map[string]uint64 {
	t.Helper()
	if _, err := os.Stat("../bpf"); errors.Is(err, fs.ErrNotExist) {
		// make kernels runs this package's test binary in a VM that holds
		// the binary, not the source tree; make test checks the headers.
		t.Skip("no bpf/ sources beside the test binary (a VM of make kernels)")
	}
	files, err := filepath.Glob("../bpf/*.h")
	if err != nil || len(files) == 0 {
		t.Fatalf("no headers in ../bpf: %v", err)
	}
	out := map[string]uint64{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := defineRE.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			v, err := strconv.ParseUint(m[2], 0, 64)
			if err != nil {
				t.Errorf("%s: #define %s %s: not a number this test can read", name, m[1], m[2])
				continue
			}
			if _, dup := out[m[1]]; dup {
				t.Errorf("%s: #define %s twice in bpf/", name, m[1])
			}
			out[m[1]] = v
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestHeaderDefinesMatchGo fails on any #define of bpf/*.h that a Go
// constant mirrors with another value, and on a new #define that says
// neither which Go constant mirrors it nor that none does.
func TestHeaderDefinesMatchGo(t *testing.T) {
	c := cDefines(t)
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		want, mirrored := goDefines[n]
		switch {
		case mirrored && c[n] != want:
			t.Errorf("bpf/: #define %s %d, but its Go mirror is %d", n, c[n], want)
		case !mirrored && !cOnly[n]:
			t.Errorf("bpf/: #define %s is new: add its Go mirror to goDefines, or its name to cOnly", n)
		}
	}
	for n := range goDefines {
		if _, ok := c[n]; !ok {
			t.Errorf("goDefines names %s, which no bpf/ header defines", n)
		}
	}
}
