package mapstest

import "testing"

// TestSkippedInside reads a child's -test.v output: the test itself
// skipped (with what it logged, a subtest's too, whose SKIP line comes
// after its parent's result), or only some of its subtests.
func TestSkippedInside(t *testing.T) {
	top := "=== RUN   TestA\n    a_test.go:9: no msg here\n--- SKIP: TestA (0.01s)\nPASS\n"
	sub := "=== RUN   TestB\n=== RUN   TestB/msg\n    b_test.go:7: msg refused\n=== RUN   TestB/skb\n--- PASS: TestB (1.00s)\n    --- SKIP: TestB/msg (0.50s)\n    --- PASS: TestB/skb (0.50s)\nPASS\n"
	for _, c := range []struct {
		out, name, why string
		skipped        bool
	}{
		{top, "TestA", "a_test.go:9: no msg here", true},
		{sub, "TestB/msg", "b_test.go:7: msg refused", true},
		{sub, "TestB", "", false},
		{sub, "TestB/skb", "", false},
	} {
		why, skipped := skippedInside(c.out, c.name)
		if why != c.why || skipped != c.skipped {
			t.Errorf("%s: %q %v, want %q %v", c.name, why, skipped, c.why, c.skipped)
		}
	}
}
