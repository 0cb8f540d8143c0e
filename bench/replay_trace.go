package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// Request traces in the Mooncake format (docs/workload.md, "Replaying a
// request trace"): one JSON object a line, one request each, with its
// arrival (`timestamp`, milliseconds from the trace's start), its prompt
// and output sizes in tokens, and `hash_ids`, one id per block of
// --replay-block tokens of the prompt (the last block partial), chained so
// that equal ids at equal positions mean an equal, reusable prefix.

// DefaultReplayBlock is the tokens a hash id covers in Mooncake's traces.
const DefaultReplayBlock = 512

// TraceRow is one request of a trace.
type TraceRow struct {
	At      time.Duration // arrival from the trace's start
	Input   int           // prompt tokens
	Output  int           // generated tokens
	HashIDs []int64       // one a block of the prompt
	Line    int           // its line in the file (1-based), for messages
}

// Trace is a trace read and checked, its rows in arrival order.
type Trace struct {
	Name  string // the file's name, for the report
	Block int    // tokens a hash id covers
	Rows  []TraceRow
}

// traceLine is a line as the format writes it.
type traceLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
}

// maxTraceLine bounds one line (a 1M-token prompt in blocks of 16 is
// 62,500 ids, well under it).
const maxTraceLine = 16 << 20

// ReadTraceFile reads a trace file (ReadTrace).
func ReadTraceFile(path string, block int) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: replay trace: %v", ErrBadConfig, err)
	}
	defer f.Close()
	t, err := ReadTrace(f, block)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Name = path
	return t, nil
}

// ReadTrace reads a trace whose hash ids each cover block tokens. Every
// line must be a request: a line that is not (bad JSON, a field missing or
// out of range, a number of ids that does not match the prompt at this
// block size) is an error naming the line, so nothing is silently dropped.
// Blank lines are skipped; other fields are ignored. Rows come back in
// arrival order (a stable sort: rows of one instant keep the file's order).
func ReadTrace(r io.Reader, block int) (*Trace, error) {
	if block < 1 {
		return nil, fmt.Errorf("%w: replay block %d: want a positive number of tokens", ErrBadConfig, block)
	}
	t := &Trace{Block: block}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxTraceLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		row, err := parseTraceLine(line, block)
		if err != nil {
			return nil, fmt.Errorf("%w: trace line %d: %v", ErrBadConfig, n, err)
		}
		row.Line = n
		t.Rows = append(t.Rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading the trace after %d rows: %v", ErrBadConfig, len(t.Rows), err)
	}
	if len(t.Rows) == 0 {
		return nil, fmt.Errorf("%w: the trace has no requests", ErrBadConfig)
	}
	sort.SliceStable(t.Rows, func(i, j int) bool { return t.Rows[i].At < t.Rows[j].At })
	return t, nil
}

func parseTraceLine(line []byte, block int) (TraceRow, error) {
	var l traceLine
	if err := json.Unmarshal(line, &l); err != nil {
		return TraceRow{}, fmt.Errorf("not a JSON request: %v", err)
	}
	switch {
	case l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil || l.HashIDs == nil:
		return TraceRow{}, fmt.Errorf("want timestamp, input_length, output_length and hash_ids")
	case *l.Timestamp < 0 || *l.Timestamp > float64(100*365*24*time.Hour/time.Millisecond):
		return TraceRow{}, fmt.Errorf("timestamp %v: want milliseconds from the trace's start", *l.Timestamp)
	case *l.InputLength < 1:
		return TraceRow{}, fmt.Errorf("input_length %d: want at least 1 token", *l.InputLength)
	case *l.OutputLength < 0:
		return TraceRow{}, fmt.Errorf("output_length %d: want 0 or more tokens", *l.OutputLength)
	}
	if want := (*l.InputLength + block - 1) / block; len(l.HashIDs) != want {
		return TraceRow{}, fmt.Errorf("%d hash ids for %d tokens: blocks of %d tokens need %d (is --replay-block right?)",
			len(l.HashIDs), *l.InputLength, block, want)
	}
	return TraceRow{
		At:      time.Duration(*l.Timestamp * float64(time.Millisecond)),
		Input:   *l.InputLength,
		Output:  *l.OutputLength,
		HashIDs: l.HashIDs,
	}, nil
}

// lastBlockTokens is how many tokens the row's last block holds (block when full).
func (r TraceRow) lastBlockTokens(block int) int {
	if m := r.Input % block; m != 0 {
		return m
	}
	return block
}

// Span is the time from the first arrival to the last.
func (t *Trace) Span() time.Duration { return t.Rows[len(t.Rows)-1].At - t.Rows[0].At }
