package layering

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLicencesAreStated keeps what README and docs/release.md promise: the
// Go code under Apache-2.0 in LICENSE, every BPF source with the dual SPDX
// line (the kernel checks the object's licence string for GPL-only
// helpers, so a file without it would be a silent change), and the texts
// that line names shipped beside it.
func TestLicencesAreStated(t *testing.T) {
	root := moduleRoot(t)
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lic := read("LICENSE")
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(lic, want) {
			t.Errorf("LICENSE lacks %q: want the full Apache-2.0 text", want)
		}
	}
	if !strings.Contains(read("LICENSES/GPL-2.0-only.txt"), "GNU GENERAL PUBLIC LICENSE") ||
		!strings.Contains(read("LICENSES/BSD-2-Clause.txt"), "Redistribution and use in source and binary forms") {
		t.Error("LICENSES/ lacks the texts the BPF sources' SPDX line names")
	}
	spdx := "SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)"
	for _, f := range trackedText(t, root) {
		if !strings.HasPrefix(f, "bpf/") || (filepath.Ext(f) != ".c" && filepath.Ext(f) != ".h") {
			continue
		}
		head := read(f)
		if len(head) > 300 {
			head = head[:300]
		}
		if !strings.Contains(head, spdx) {
			t.Errorf("%s: no %q line near its top", f, spdx)
		}
	}
	readme := read("README.md")
	if !strings.Contains(readme, "Apache-2.0") || !strings.Contains(readme, "GPL-2.0-only OR BSD-2-Clause") {
		t.Error("README does not state the licences")
	}
}

// TestChangelogHasAnUnreleasedSection keeps the changelog in the form
// docs/release.md cuts a release from: an Unreleased section on top, then
// released versions as [X.Y.Z] - YYYY-MM-DD, newest first.
func TestChangelogHasAnUnreleasedSection(t *testing.T) {
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	heads := regexp.MustCompile(`(?m)^## (.*)$`).FindAllStringSubmatch(string(b), -1)
	if len(heads) == 0 || heads[0][1] != "[Unreleased]" {
		t.Fatalf("CHANGELOG.md: the first section must be ## [Unreleased], got %v", heads)
	}
	version := regexp.MustCompile(`^\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}$`)
	for _, h := range heads[1:] {
		if !version.MatchString(h[1]) {
			t.Errorf("CHANGELOG.md: section %q is not [X.Y.Z] - YYYY-MM-DD", h[1])
		}
	}
}
