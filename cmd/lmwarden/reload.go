package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
)

// What stray signals do to serve. SIGHUP, which kills a Go program that
// does not handle it (silently: no drain, every stream cut, and under
// systemd a clean exit that Restart=on-failure leaves dead), reloads the
// configuration, as operators expect of a daemon (`systemctl reload`
// sends it): the file is read and checked again; what can change at run
// time is applied (each model's policy and affinity, the settings the
// admin API changes too), every other change is named in a warning as
// waiting for a restart, and a file with mistakes is refused with them
// listed, the running configuration kept. SIGPIPE is ignored: a log
// reader that went away (a closed journal stream) must not kill the
// warden at its next log line, as Go's default does for stdout and
// stderr. SIGINT and SIGTERM shut down (serve.go).

// reloader reloads serve's configuration on SIGHUP.
type reloader struct {
	log *slog.Logger
	ch  chan os.Signal
	w   *agent.Warden
	// load reads the file again with serve's flag overrides (nil: serve
	// runs without a file).
	load    func() (*config.Config, error)
	running *config.Config // what the last load said
}

// newReloader catches SIGHUP and SIGPIPE from now on: one that comes
// while serve starts waits for start.
func newReloader(log *slog.Logger) *reloader {
	r := &reloader{log: log, ch: make(chan os.Signal, 4)}
	signal.Notify(r.ch, syscall.SIGHUP, syscall.SIGPIPE)
	return r
}

// start handles the signals for w until ctx ends; load is nil without a
// configuration file.
func (r *reloader) start(ctx context.Context, w *agent.Warden, load func() (*config.Config, error)) {
	r.w, r.load = w, load
	if load != nil {
		r.running, _ = load() // as the file says (serve's own cfg is changed after its load)
	}
	go func() {
		defer signal.Stop(r.ch)
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-r.ch:
				if sig == syscall.SIGHUP {
					r.reload()
				}
			}
		}
	}()
}

// reload is one SIGHUP.
func (r *reloader) reload() {
	if r.load == nil {
		r.log.Warn("SIGHUP: serve runs without --config: nothing to reload; the flags are read at start only")
		return
	}
	next, err := r.load()
	if err == nil && r.running == nil {
		err = fmt.Errorf("the file did not load at start either")
	}
	if err != nil {
		r.log.Error("SIGHUP: configuration not reloaded; the running one stays", "err", err)
		return
	}
	applied, restart := diffConfig(r.running, next)
	for _, c := range applied {
		m := r.w.Model(c.model)
		var err error
		switch c.field {
		case "policy":
			err = m.SetPolicy(next.Models[c.index].Policy)
		case "affinity":
			m.SetAffinity(next.Models[c.index].Affinity)
		}
		if err != nil {
			r.log.Error("SIGHUP: configuration change not applied", "model", c.model, "setting", c.field, "err", err)
			continue
		}
		r.log.Info("config change", "model", c.model, "setting", c.field, "from", c.from, "to", c.to, "origin", "SIGHUP")
	}
	r.log.Info("SIGHUP: configuration reloaded", "applied", len(applied), "need_restart", len(restart))
	if len(restart) > 0 {
		r.log.Warn("SIGHUP: configuration changes that apply at the next restart (systemctl restart lmwarden: requests in flight finish, sessions survive)",
			"fields", strings.Join(restart, ","))
	}
	r.running = next
}

// change is one setting a reload applies at run time.
type change struct {
	model    string
	index    int // in the new configuration's models
	field    string
	from, to string
}

// diffConfig compares two configurations: the changes a reload applies
// (each model's policy and affinity), and the fields (by their YAML path)
// whose change waits for a restart.
func diffConfig(old, next *config.Config) (applied []change, restart []string) {
	restart = diffFields("", reflect.ValueOf(*old), reflect.ValueOf(*next), "models")
	byName := map[string]config.ModelConfig{}
	for _, m := range old.Models {
		byName[m.Name] = m
	}
	for i, m := range next.Models {
		o, ok := byName[m.Name]
		if !ok {
			restart = append(restart, fmt.Sprintf("models[%d] (%s: a new model)", i, m.Name))
			continue
		}
		delete(byName, m.Name)
		if o.Policy != m.Policy {
			applied = append(applied, change{m.Name, i, "policy", string(o.Policy), string(m.Policy)})
		}
		if o.Affinity != m.Affinity {
			applied = append(applied, change{m.Name, i, "affinity", strconv.FormatBool(o.Affinity), strconv.FormatBool(m.Affinity)})
		}
		restart = append(restart, diffFields(fmt.Sprintf("models[%d].", i), reflect.ValueOf(o), reflect.ValueOf(m), "policy", "affinity")...)
	}
	for name := range byName {
		restart = append(restart, fmt.Sprintf("models (%s: removed)", name))
	}
	return applied, restart
}

// diffFields names the exported fields of two structs of one type that
// differ, by their YAML names under prefix, leaving out skip.
func diffFields(prefix string, a, b reflect.Value, skip ...string) []string {
	var out []string
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" || contains(skip, name) {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, prefix+name)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
