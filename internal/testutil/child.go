package testutil

import (
	"bufio"
	"os/exec"
	"testing"
)

// StartChild starts cmd, a helper process the test owns, and returns its
// standard output. Its stdin is a pipe from this process, so a child that
// waits on stdin exits when the test ends, also when the test's process
// dies without its cleanup; the cleanup closes the pipe, kills and reaps it.
func StartChild(tb testing.TB, cmd *exec.Cmd) *bufio.Reader {
	tb.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return bufio.NewReader(out)
}
