package testutil

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			calls.Add(1)
		}
	}()
	Eventually(t, time.Minute, "the other goroutine", func() bool { return calls.Load() == 100 })
	<-done
}

func TestEventuallyFailsWithWhatItWaitedFor(t *testing.T) {
	rec := &recorder{TB: t}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer func() { recover() }() // recorder.Fatalf stops the goroutine as FailNow would
		Eventually(rec, 30*time.Millisecond, "the queue to drain", func() bool { return false })
	}()
	<-finished
	if !strings.Contains(rec.msg, "timed out after 30ms waiting for the queue to drain") {
		t.Fatalf("failure message %q does not say what it waited for", rec.msg)
	}
}

// recorder is a testing.TB whose Fatalf records the message instead of
// failing the real test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}
