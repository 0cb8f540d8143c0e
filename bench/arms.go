package bench

import (
	"fmt"
	"strings"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// Arm is one side of an A/B: a name for the table and what the warden runs.
type Arm struct {
	Name     string
	Affinity bool
	Policy   config.Policy // used while Affinity is on
}

// The two arms of the reference A/B.
const (
	ArmOff = "off" // affinity off: vLLM's own balancer decides
	ArmOn  = "on"  // affinity on: policy sticky
)

// ParseArms reads a comma-separated list: "off", "on", or policy names
// (sticky, vllm-lb, shortest-queue, round-robin, random, hash, ...).
func ParseArms(list string) ([]Arm, error) {
	var arms []Arm
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %q twice", ErrBadArm, name)
		}
		seen[name] = true
		a, err := parseArm(name)
		if err != nil {
			return nil, err
		}
		arms = append(arms, a)
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("%w: no arms in %q", ErrBadArm, list)
	}
	return arms, nil
}

func parseArm(name string) (Arm, error) {
	switch name {
	case ArmOff:
		return Arm{Name: name, Affinity: false, Policy: config.PolicySticky}, nil
	case ArmOn:
		return Arm{Name: name, Affinity: true, Policy: config.PolicySticky}, nil
	}
	for _, p := range config.Policies() {
		if string(p) == name {
			return Arm{Name: name, Affinity: true, Policy: p}, nil
		}
	}
	known := []string{ArmOff, ArmOn}
	for _, p := range config.Policies() {
		known = append(known, string(p))
	}
	return Arm{}, fmt.Errorf("%w: %q (want one of %s)", ErrBadArm, name, strings.Join(known, ", "))
}

// describe says what an arm runs, for the report.
func (a Arm) describe(lb vllmlb.StatsMode, oneEndpoint bool) string {
	return a.describeLB(lb.String(), oneEndpoint)
}

// describeLB is describe with the stats mode as a label, "" when the bench
// cannot know it (the warden's or vLLM's own setting in a real run).
func (a Arm) describeLB(lb string, oneEndpoint bool) string {
	if lb == "" {
		lb = "as configured there"
	}
	switch {
	case !a.Affinity && oneEndpoint:
		return fmt.Sprintf("affinity off: vLLM's balancer in the replica (lb-stats %s)", lb)
	case !a.Affinity:
		return fmt.Sprintf("affinity off: vllm-lb emulation, lb-stats %s", lb)
	case a.Policy == config.PolicyVLLMLB:
		return fmt.Sprintf("policy vllm-lb, lb-stats %s", lb)
	default:
		return "policy " + string(a.Policy)
	}
}
