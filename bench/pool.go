package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Pooling seeds (`lmwarden bench-pool`, docs/bench.md): one seed's TTFT p95
// of the Claude Code workload swings by 2x between builds that differ in a
// handful of turns, so policies are ranked on many seeds at once: every
// measured turn of every seed pooled, and a bootstrap over seeds. This file
// reads the runs (`bench --virtual --trace` output directories) into groups;
// pool_table.go computes and prints the table.

// PoolSpec is one group on the command line: [LABEL=]GLOB[:ARM].
type PoolSpec struct {
	Label string // "" : the arm (or the glob)
	Glob  string // matches --out directories
	Arm   string // "" : every arm of the runs is a group of its own
}

// ParsePoolSpec reads [LABEL=]GLOB[:ARM]. ARM is what follows the last
// colon when it holds no path separator.
func ParsePoolSpec(s string) (PoolSpec, error) {
	var p PoolSpec
	if i := strings.Index(s, "="); i >= 0 {
		p.Label, s = s[:i], s[i+1:]
		if p.Label == "" {
			return p, fmt.Errorf("%w: group %q: empty label before '='", ErrBadConfig, s)
		}
	}
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.ContainsRune(s[i+1:], filepath.Separator) {
		s, p.Arm = s[:i], s[i+1:]
		if p.Arm == "" {
			return p, fmt.Errorf("%w: group %q: empty arm after ':'", ErrBadConfig, s)
		}
	}
	if s == "" {
		return p, fmt.Errorf("%w: group without a glob", ErrBadConfig)
	}
	p.Glob = s
	return p, nil
}

// PoolConfig is what every pooled run must share: runs of another replica
// count, profile, workload, window or steps are not the same experiment.
type PoolConfig struct {
	Replicas    int
	Profile     string
	Workload    string
	StepSeconds float64
	Steps       []string // in the runs' order, as poolStepKey names them
}

func (c PoolConfig) String() string {
	return fmt.Sprintf("replicas %d, profile %s, workload %s, step_seconds %g, steps %s",
		c.Replicas, c.Profile, c.Workload, c.StepSeconds, strings.Join(c.Steps, ","))
}

func (c PoolConfig) equal(o PoolConfig) bool {
	return c.Replicas == o.Replicas && c.Profile == o.Profile && c.Workload == o.Workload &&
		c.StepSeconds == o.StepSeconds && slices.Equal(c.Steps, o.Steps)
}

// poolStepKey is what a step is matched by across runs: a step stated as a
// load ("1x") by the load alone, since each seed's sessions size it to a
// different count ("1x (23)", "1x (25)"); any other step by its label.
func poolStepKey(s Step) string {
	if s.CacheLoad > 0 && s.ReplaySpeed == 0 {
		return Step{CacheLoad: s.CacheLoad}.String()
	}
	return s.String()
}

// PoolTurns are the measured turns of one step and arm of one run
// (sent_s >= 0, not cut), as the table needs them.
type PoolTurns struct {
	Step       Step      // as this run sized it
	TTFT       []float64 // seconds; turns without a token (NaN) left out
	Completion []float64 // done_s - sent_s, seconds
	Turns      int
	Parked     int // turns that waited at the warden (parked_s > 0)
	Output     int64
	Prompt     int64
	Cached     int64
	// SubPrompt and SubCached are the subagents' later turns (a session
	// with a '/', turn > 0): whether their cache followed them.
	SubPrompt, SubCached int64
}

// PoolRun is one --out directory, one arm of it.
type PoolRun struct {
	Dir   string
	Seed  uint64
	Steps map[string]*PoolTurns // by poolStepKey
}

// PoolGroup is one row of the pooled table: one arm over many seeds.
type PoolGroup struct {
	Label string
	Arm   string
	Runs  map[uint64]*PoolRun // by seed
}

// Seeds returns the group's seeds in order.
func (g *PoolGroup) Seeds() []uint64 {
	out := make([]uint64, 0, len(g.Runs))
	for s := range g.Runs {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Pool is every group of one comparison.
type Pool struct {
	Config PoolConfig
	Groups []*PoolGroup
}

// poolDir is one directory read: its report and its turns by arm.
type poolDir struct {
	dir    string
	report *Report
	cfg    PoolConfig
	arms   map[string]map[string]*PoolTurns // arm -> step label -> turns
}

// ReadPool reads every group's directories and checks that they belong in
// one table.
func ReadPool(specs []PoolSpec) (*Pool, error) {
	p := &Pool{}
	var first string
	for _, spec := range specs {
		dirs, err := poolGlob(spec.Glob)
		if err != nil {
			return nil, err
		}
		var read []*poolDir
		for _, dir := range dirs {
			d, err := readPoolDir(dir)
			if err != nil {
				return nil, err
			}
			if first == "" {
				first, p.Config = dir, d.cfg
			} else if !d.cfg.equal(p.Config) {
				return nil, fmt.Errorf("%w: %s (%s) and %s (%s) are different experiments; pool runs of one setup",
					ErrBadConfig, first, p.Config, dir, d.cfg)
			}
			read = append(read, d)
		}
		groups, err := poolGroups(spec, read)
		if err != nil {
			return nil, err
		}
		p.Groups = append(p.Groups, groups...)
	}
	seen := map[string]bool{}
	for _, g := range p.Groups {
		if seen[g.Label] {
			return nil, fmt.Errorf("%w: two groups are labelled %q; name them LABEL=GLOB[:ARM]", ErrBadConfig, g.Label)
		}
		seen[g.Label] = true
	}
	return p, nil
}

// poolGlob returns the directories a glob matches (files such as a run's
// .log beside it are skipped).
func poolGlob(glob string) ([]string, error) {
	matches, err := filepath.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("%w: glob %q: %v", ErrBadConfig, glob, err)
	}
	var dirs []string
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			dirs = append(dirs, m)
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: %q matches no directory", ErrBadConfig, glob)
	}
	return dirs, nil
}

// poolGroups makes the spec's groups: its arm, or every arm of the runs.
func poolGroups(spec PoolSpec, dirs []*poolDir) ([]*PoolGroup, error) {
	arms := []string{spec.Arm}
	if spec.Arm == "" {
		arms = dirs[0].report.Arms
	}
	var out []*PoolGroup
	for _, arm := range arms {
		g := &PoolGroup{Label: spec.Label, Arm: arm, Runs: map[uint64]*PoolRun{}}
		switch {
		case spec.Label == "":
			g.Label = arm
		case spec.Arm == "" && len(arms) > 1:
			g.Label = spec.Label + " " + arm
		}
		for _, d := range dirs {
			steps, ok := d.arms[arm]
			if !ok {
				return nil, fmt.Errorf("%w: %s has no arm %q (its arms: %s)", ErrBadConfig, d.dir, arm, strings.Join(d.report.Arms, ", "))
			}
			if prev, dup := g.Runs[d.report.Seed]; dup {
				return nil, fmt.Errorf("%w: group %q has seed %d twice: %s and %s", ErrBadConfig, g.Label, d.report.Seed, prev.Dir, d.dir)
			}
			g.Runs[d.report.Seed] = &PoolRun{Dir: d.dir, Seed: d.report.Seed, Steps: steps}
		}
		out = append(out, g)
	}
	return out, nil
}

// readPoolDir reads one run's report.json and trace_requests.csv.
func readPoolDir(dir string) (*poolDir, error) {
	rep, err := ReadReport(filepath.Join(dir, ReportJSON))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a bench --out directory: %v", ErrBadConfig, dir, err)
	}
	d := &poolDir{dir: dir, report: rep, arms: map[string]map[string]*PoolTurns{}}
	d.cfg = PoolConfig{Replicas: rep.Replicas, Profile: rep.Profile, Workload: rep.Workload, StepSeconds: rep.StepSeconds}
	for _, arm := range rep.Arms {
		d.arms[arm] = map[string]*PoolTurns{}
	}
	for _, s := range rep.Steps {
		key := poolStepKey(s)
		d.cfg.Steps = append(d.cfg.Steps, key)
		for _, arm := range rep.Arms {
			// trace_requests.csv labels rows with the sized step ("1x (25)").
			d.arms[arm][s.String()] = &PoolTurns{Step: s}
		}
	}
	fh, err := os.Open(filepath.Join(dir, TraceRequestsCSV))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s: run bench with --trace", ErrBadConfig, dir, TraceRequestsCSV)
	} else if err != nil {
		return nil, err
	}
	defer fh.Close()
	if err := d.readTurns(fh); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, TraceRequestsCSV), err)
	}
	for arm, steps := range d.arms {
		byKey := map[string]*PoolTurns{}
		for _, t := range steps {
			byKey[poolStepKey(t.Step)] = t
		}
		d.arms[arm] = byKey
	}
	return d, nil
}

// readTurns adds trace_requests.csv's measured turns to d.arms; columns are
// found by their names in the writer's header (trace.go).
func (d *poolDir) readTurns(r io.Reader) error {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return err
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, h := range traceRequestsHeader {
		if _, ok := col[h]; !ok {
			return fmt.Errorf("no column %q", h)
		}
	}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		get := func(name string) string { return rec[col[name]] }
		turns := d.arms[get("arm")][get("sessions")]
		if turns == nil {
			return fmt.Errorf("line %d: step %q arm %q not in report.json", line, get("sessions"), get("arm"))
		}
		if err := turns.add(get); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
}

// add counts one trace row if it is a measured turn.
func (t *PoolTurns) add(get func(string) string) error {
	var nums [8]float64
	for i, name := range []string{"sent_s", "ttft_s", "done_s", "prompt_tokens", "cached_tokens", "output_tokens", "parked_s", "turn"} {
		v, err := strconv.ParseFloat(get(name), 64)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		nums[i] = v
	}
	sent, ttft, done, prompt, cached, output, parked, turn := nums[0], nums[1], nums[2], int64(nums[3]), int64(nums[4]), int64(nums[5]), nums[6], nums[7]
	if sent < 0 || get("cut") == "true" {
		return nil // warm-up, or cut by the window's close
	}
	t.Turns++
	if !math.IsNaN(ttft) {
		t.TTFT = append(t.TTFT, ttft)
	}
	t.Completion = append(t.Completion, done-sent)
	t.Output += output
	t.Prompt += prompt
	t.Cached += cached
	if parked > 0 {
		t.Parked++
	}
	if turn > 0 && strings.Contains(get("session"), "/") {
		t.SubPrompt += prompt
		t.SubCached += cached
	}
	return nil
}
