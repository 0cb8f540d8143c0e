package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSessionsPrintsHashesNotIDs(t *testing.T) {
	w := mustAdminWarden(t)
	var out bytes.Buffer
	if err := runSessions([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	hash := fmt.Sprintf("%016x", w.Models()[0].HashSession("cli-session"))
	if !strings.Contains(text, hash) || strings.Contains(text, "cli-session") {
		t.Errorf("sessions output:\n%s", text)
	}
	if !strings.Contains(text, "SESSION-HASH") || !strings.Contains(text, "1 of 1 live sessions") {
		t.Errorf("sessions output:\n%s", text)
	}
	if err := runSessions([]string{"--admin", w.AdminAddr(), "--model", "nope"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown model: %v", err)
	}
	if err := runSessions([]string{"--limit", "-1"}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Errorf("bad limit: %v", err)
	}
}
