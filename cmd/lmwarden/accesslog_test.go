package main

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

// The access log is on by default; access_log: false turns it off, and
// --access-log on|off overrides the file either way.
func TestAccessLogSwitch(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	off := false
	for _, c := range []struct {
		file *bool
		flag string
		on   bool
	}{
		{nil, "", true}, {&off, "", false}, {&off, "on", true}, {nil, "off", false},
	} {
		cfg := &config.Config{AccessLog: c.file}
		got, err := accessLogger(cfg, c.flag, log)
		if err != nil || (got != nil) != c.on {
			t.Errorf("access_log %v, --access-log %q: logger %v (%v), want on=%v", c.file, c.flag, got, err, c.on)
		}
	}
	if _, err := accessLogger(&config.Config{}, "yes", log); !errors.Is(err, errUsage) {
		t.Errorf("--access-log yes: %v, want a usage error", err)
	}
}
