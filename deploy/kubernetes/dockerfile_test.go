package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// No container engine runs on the machines this project is built on, and
// the base images cannot be pulled there, so deploy/Dockerfile is not
// built by the tests: it is parsed by BuildKit's own Dockerfile parser
// with BuildKit's lint rules (what `docker build --check` runs), and
// checked against what the manifests expect of the image.
func TestDockerfile(t *testing.T) {
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Errorf("parser: %s", w.Short)
	}
	var lint []string
	stages, metaArgs, err := instructions.Parse(res.AST, linter.New(&linter.Config{
		Warn: func(rule, desc, url, msg string, loc []parser.Range) { lint = append(lint, rule+": "+msg) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lint {
		t.Errorf("lint %s", l)
	}
	if len(stages) != 2 || stages[0].Name != "build" {
		t.Fatalf("want two stages, build then the image; got %d", len(stages))
	}

	// The build stage's Go is the go.mod's.
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	var goArg string
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" && kv.Value != nil {
				goArg = *kv.Value
			}
		}
	}
	if goLine == nil || goArg != string(goLine[1]) {
		t.Errorf("ARG GO_VERSION=%s, go.mod says go %s", goArg, goLine[1])
	}

	// The build: static (no cgo, so no C toolchain or libc in the image),
	// of the one binary.
	var build string
	for _, c := range stages[0].Commands {
		if r, ok := c.(*instructions.RunCommand); ok && strings.Contains(strings.Join(r.CmdLine, " "), "go build") {
			build = strings.Join(r.CmdLine, " ")
		}
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.HasSuffix(build, "./cmd/lmwarden") {
		t.Errorf("the build %q: want CGO_ENABLED=0 go build ... ./cmd/lmwarden", build)
	}
	if out, err := exec.Command("go", "list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}", "../../cmd/lmwarden").Output(); err != nil {
		t.Errorf("go list: %v", err)
	} else if cgo := strings.TrimSpace(string(out)); cgo != "" {
		t.Errorf("packages of the binary need cgo, so CGO_ENABLED=0 would leave them out: %s", cgo)
	}

	// The image: a pinned base, the binary from the build stage, an
	// unprivileged user (the DaemonSet runs the warden as root with its
	// three capabilities), exec-form entrypoint, the ports the manifests use.
	img := stages[1]
	if !strings.Contains(img.BaseName, ":") || strings.HasSuffix(img.BaseName, ":latest") {
		t.Errorf("base image %q: pin a tag", img.BaseName)
	}
	var user string
	var exposed []string
	copied := false
	for _, c := range img.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.CopyCommand:
			copied = copied || c.From == "build"
		case *instructions.EntrypointCommand:
			if !c.PrependShell && (len(c.CmdLine) != 1 || c.CmdLine[0] != "/usr/local/bin/lmwarden") {
				t.Errorf("ENTRYPOINT %v, want [/usr/local/bin/lmwarden]", c.CmdLine)
			}
			if c.PrependShell {
				t.Error("ENTRYPOINT in shell form: signals would reach the shell, not lmwarden")
			}
		}
	}
	if !copied {
		t.Error("the image does not copy the binary from the build stage")
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: the image's default user must not be root", user)
	}
	m := load(t)
	for _, c := range append(m.daemonSets[0].Spec.Template.Spec.Containers, m.deploys[0].Spec.Template.Spec.Containers...) {
		for _, p := range c.Ports {
			if !slices.Contains(exposed, fmt.Sprint(p.ContainerPort)) {
				t.Errorf("container %s's port %d is not EXPOSEd (%v)", c.Name, p.ContainerPort, exposed)
			}
		}
		if c.Image == "" {
			t.Errorf("container %s has no image", c.Name)
		}
	}
}
