// Package testutil holds the helpers every package's tests share. It
// imports no project package, so any test, maps' and bpf's included, can
// use it without an import cycle.
package testutil

import (
	"testing"
	"time"
)

// Polling interval bounds of Eventually: a condition that holds soon is
// seen within a millisecond or two, one that takes long costs at most a
// check every maxPoll.
const (
	minPoll = time.Millisecond
	maxPoll = 50 * time.Millisecond
)

// Eventually waits until cond returns true and fails the test with
// "timed out after TIMEOUT waiting for WHAT" if it has not within timeout.
// It is how a test waits for something another goroutine or process does:
// on a condition, never on a fixed sleep, so a slow machine only makes the
// test slower, and the timeout is a bound on a hang, not a timing
// assertion (make it generous: tests share two cores with other suites).
//
// cond is called from the test's goroutine, first at once, then with a
// growing pause between calls (1 ms doubling up to 50 ms). A cond that
// wants to say why it is not yet true can tb.Logf it: the log shows only
// when the test fails (or with -v). Eventually must not be called from a
// goroutine other than the test's (it calls tb.Fatalf).
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	pause := minPoll
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}
