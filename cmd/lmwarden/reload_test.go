package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestReloadAppliesPolicyAndAffinityAndNamesTheRest(t *testing.T) {
	old := config.DefaultConfig()
	old.Models = []config.ModelConfig{config.DefaultModel("a"), config.DefaultModel("b")}
	next := config.DefaultConfig()
	next.Models = []config.ModelConfig{config.DefaultModel("a"), config.DefaultModel("c")}
	next.Models[0].Policy = config.PolicyCost
	next.Models[0].Affinity = !old.Models[0].Affinity
	next.Models[0].MaxSessions = 7
	next.BodyTimeout = 2 * old.BodyTimeout
	applied, restart := diffConfig(old, next)
	var got []string
	for _, c := range applied {
		got = append(got, c.model+"."+c.field+"="+c.to)
	}
	if want := []string{"a.policy=cost", "a.affinity=" + strconv.FormatBool(next.Models[0].Affinity)}; !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
	joined := strings.Join(restart, " ")
	for _, want := range []string{"body_timeout", "models[0].max_sessions", "models[1] (c: a new model)", "models (b: removed)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the restart list %q lacks %s", joined, want)
		}
	}
	if strings.Contains(joined, "policy") || strings.Contains(joined, "affinity") {
		t.Errorf("the restart list %q names what a reload applies", joined)
	}
	if a, r := diffConfig(old, old); len(a)+len(r) != 0 {
		t.Errorf("the same configuration differs: %v %v", a, r)
	}
}

// The unit restarts the warden after any exit it did not ask for, and
// reloads it with SIGHUP.
func TestUnitRestartsAfterAnyUnexpectedExitAndReloadsWithHangup(t *testing.T) {
	b, err := os.ReadFile("../../scripts/lmwarden.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"\nRestart=always\n", "\nExecReload=/bin/kill -HUP $MAINPID\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("scripts/lmwarden.service lacks %q", strings.TrimSpace(want))
		}
	}
}
