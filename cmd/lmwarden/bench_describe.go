package main

import (
	"fmt"
	"io"

	"github.com/lmwarden/lmwarden/bench"
)

// describeSessions is how many sessions --describe plays on paper.
const describeSessions = 2000

// describeWorkload is `lmwarden bench --workload claude-code --describe`:
// the workload's generated percentiles beside the published ones, at the
// model's context (--max-context, else the profile's).
func (f *benchFlags) describeWorkload(w io.Writer) error {
	if f.workload != bench.ClaudeCodeShape.Name {
		return fmt.Errorf("--describe is for --workload claude-code: %w", errUsage)
	}
	limit := f.maxContext
	if limit <= 0 {
		f.overrides.name = f.profile
		p, err := f.overrides.resolve()
		if err != nil {
			return err
		}
		limit = p.ContextLimit()
	}
	wl := bench.NewWorkloadShape(f.seed, bench.ClaudeCodeShape)
	table, err := wl.DescribeTable(describeSessions, limit)
	if err != nil {
		return fmt.Errorf("%v: %w", err, errUsage)
	}
	fmt.Fprintf(w, "Workload claude-code, seed %d, %d sessions played on paper at a %d-token context (replies of their max_tokens):\n\n%s",
		f.seed, describeSessions, limit, table)
	return nil
}
