package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The kernel side of the warden (the BPF programs, the maps, the kernel
// datapath, and the wire format and datapath contract it implements) must
// build without the control plane: the table's one-step rule cannot see a
// dependency that goes through a third package, so this checks the whole
// closure, as `go list -deps` computes it.
var (
	kernelSide   = []string{"./kernel/...", "./maps/...", "./bpf/...", "./l7/datapath/...", "./l7/http1/..."}
	controlPlane = []string{"agent", "l7", "sim", "bench", "picker"} // each with its sub-packages, except l7's
)

func TestKernelSideLinksNoControlPlane(t *testing.T) {
	root := moduleRoot(t)
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, kernelSide...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var deps []string
	for _, ip := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(ip, module+"/"); ok {
			deps = append(deps, rel)
		}
	}
	if !slices.Contains(deps, "kernel") || !slices.Contains(deps, "l7/datapath") {
		t.Fatalf("go list -deps %v found %v: the check would check nothing", kernelSide, deps)
	}
	for _, p := range controlPlaneIn(deps) {
		t.Errorf("the kernel side (%s) depends on %s: it must build without the control plane (docs/architecture.md)",
			strings.Join(kernelSide, " "), p)
	}
}

// TestControlPlaneInFindsAgentAndTheShim pins what the check refuses.
func TestControlPlaneInFindsAgentAndTheShim(t *testing.T) {
	got := controlPlaneIn([]string{"bpf", "maps", "l7/http1", "l7/datapath", "kernel", "l7", "agent/placement", "agentx", "sim"})
	want := []string{"l7", "agent/placement", "sim"}
	if !slices.Equal(got, want) {
		t.Fatalf("controlPlaneIn = %v, want %v", got, want)
	}
}

// controlPlaneIn returns the packages of deps that belong to the control
// plane (or the world it is measured against): agent and everything under
// it, the shim l7 itself (not l7/datapath or l7/http1), sim, bench, picker.
func controlPlaneIn(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, c := range controlPlane {
			if d == c || (c != "l7" && strings.HasPrefix(d, c+"/")) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}
