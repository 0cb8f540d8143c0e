package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/lmwarden/lmwarden/agent"
)

// Readiness and the watchdog for systemd (Type=notify, WatchdogSec= in
// scripts/lmwarden.service). Outside systemd ($NOTIFY_SOCKET unset) every
// call is a no-op.

// sdNotify sends the states (READY=1, STATUS=..., one per line) to the
// service manager; a failure is logged, never fatal.
func sdNotify(log *slog.Logger, states ...string) {
	if _, err := daemon.SdNotify(false, strings.Join(states, "\n")); err != nil {
		log.Warn("sd_notify", "err", err)
	}
}

// sdWatchdog pings the service manager's watchdog at half its interval
// for as long as the control plane answers: each ping first takes every
// model's lock (Readiness reads every model), so a warden stuck on one
// stops pinging and systemd restarts it. It returns when ctx ends.
func sdWatchdog(ctx context.Context, w *agent.Warden, log *slog.Logger) {
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil || every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Readiness()
			sdNotify(log, daemon.SdNotifyWatchdog)
		}
	}
}
