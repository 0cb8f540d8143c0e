package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress shows where a run is: a bar redrawn in place on a terminal (step,
// arm, share done, wall time left), or one line per finished step and arm
// when the output is a file or a pipe, so logs stay readable.
type Progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	total   int // step×arm phases in the run
	done    int
	started time.Time
	step    Step
	arm     string
	frac    float64
	last    time.Time
}

// NewProgress reports on w (usually os.Stderr) for a run of phases phases.
// The bar is drawn only when w is a terminal.
func NewProgress(w io.Writer, phases int) *Progress {
	return &Progress{w: w, tty: isTerminal(w), total: max(phases, 1), started: time.Now()}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Begin starts a phase (one arm of one step).
func (p *Progress) Begin(step Step, arm string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step, p.arm, p.frac = step, arm, 0
	p.draw(true)
}

// Update sets how much of the current phase is done (0-1). Redraws at most
// ten times a second.
func (p *Progress) Update(frac float64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frac = min(max(frac, 0), 1)
	p.draw(false)
}

// End closes the phase with a one-line summary.
func (p *Progress) End(summary string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.frac = 0
	line := fmt.Sprintf("bench: %s, arm %s: %s (%s elapsed)", p.step.phrase(), p.arm, summary,
		time.Since(p.started).Round(100*time.Millisecond))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

// Finish clears the bar.
func (p *Progress) Finish() {
	if p == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K")
}

func (p *Progress) draw(force bool) {
	if !p.tty {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	overall := (float64(p.done) + p.frac) / float64(p.total)
	left := "?"
	if overall > 0.01 {
		elapsed := now.Sub(p.started)
		left = (time.Duration(float64(elapsed)/overall) - elapsed).Round(time.Second).String()
	}
	const width = 24
	n := int(overall * width)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %3.0f%%  step %s, arm %s (%d/%d)  ~%s left",
		strings.Repeat("#", n), strings.Repeat(".", width-n), 100*overall,
		p.step.phrase(), p.arm, p.done+1, p.total, left)
}
