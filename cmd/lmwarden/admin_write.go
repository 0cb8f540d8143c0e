package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
)

// The operator's everyday writes, from the command line rather than curl
// with a token: each is one PUT of the admin API (docs/admin.md) with the
// token read from the file the warden made, and prints what the model
// looks like afterwards.

func init() {
	register("affinity", "turn a model's session affinity on or off: lmwarden affinity MODEL on|off", func(args []string) error {
		return runAffinity(args, os.Stdout)
	})
	register("policy", "set the placement policy a model uses while affinity is on: lmwarden policy MODEL NAME", func(args []string) error {
		return runPolicy(args, os.Stdout)
	})
	register("drain", "drain a replica (no new conversations, live ones move at their next turn): lmwarden drain MODEL REPLICA [--undo]", func(args []string) error {
		return runDrain(args, os.Stdout)
	})
}

// writeFlags are the flags every admin write takes.
type writeFlags struct {
	admin, tokenFile string
}

func (w *writeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.admin, "admin", config.DefaultAdmin, "admin address of the running warden (host:port or URL)")
	fs.StringVar(&w.tokenFile, "admin-token-file", agent.DefaultAdminTokenFile(), "the warden's admin token (readable by the warden's user and root)")
}

// parseWrite parses a write's flags and checks it got n arguments, which
// it returns (flags may come before or after them).
func parseWrite(name, usage string, args []string, n int, extra func(*flag.FlagSet)) (writeFlags, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var w writeFlags
	w.register(fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n", usage)
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return w, nil, err
			}
			return w, nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != n {
		return w, nil, fmt.Errorf("%w: want %s", errUsage, usage)
	}
	return w, pos, nil
}

func runAffinity(args []string, out io.Writer) error {
	w, pos, err := parseWrite("affinity", "lmwarden affinity MODEL on|off", args, 2, nil)
	if err != nil {
		return err
	}
	var on bool
	switch pos[1] {
	case "on":
		on = true
	case "off":
	default:
		return fmt.Errorf("%w: affinity %q: want on or off", errUsage, pos[1])
	}
	st, err := w.put("/api/v1/models/"+url.PathEscape(pos[0])+"/affinity", adminapi.AffinityRequest{Affinity: &on})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "model %s: affinity %s (effective policy %s)\n", st.Name, onOff(st.Affinity), st.Effective)
	return nil
}

func runPolicy(args []string, out io.Writer) error {
	w, pos, err := parseWrite("policy", "lmwarden policy MODEL NAME ("+servePolicyNames()+")", args, 2, nil)
	if err != nil {
		return err
	}
	if _, err := config.ParsePolicy(config.Policy(pos[1])); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := w.put("/api/v1/models/"+url.PathEscape(pos[0])+"/policy", adminapi.PolicyRequest{Policy: pos[1]})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "model %s: policy %s (affinity %s, effective policy %s)\n", st.Name, st.Policy, onOff(st.Affinity), st.Effective)
	return nil
}

func runDrain(args []string, out io.Writer) error {
	var undo bool
	w, pos, err := parseWrite("drain", "lmwarden drain MODEL REPLICA [--undo] (REPLICA: its index, as lmwarden status shows it)", args, 2,
		func(fs *flag.FlagSet) {
			fs.BoolVar(&undo, "undo", false, "end the drain: the replica takes new conversations again")
		})
	if err != nil {
		return err
	}
	drain := !undo
	st, err := w.put("/api/v1/models/"+url.PathEscape(pos[0])+"/replicas/"+url.PathEscape(pos[1])+"/drain", adminapi.DrainRequest{Drain: &drain})
	if err != nil {
		return err
	}
	for _, r := range st.Replicas {
		if fmt.Sprint(r.Index) != pos[1] {
			continue
		}
		if r.Draining {
			fmt.Fprintf(out, "model %s: replica %d (%s) drains: %d in flight finish there, %d pinned conversations move at their next turn\n",
				st.Name, r.Index, r.URL, r.InFlight, r.Sessions)
		} else {
			fmt.Fprintf(out, "model %s: replica %d (%s) takes new conversations again\n", st.Name, r.Index, r.URL)
		}
	}
	return nil
}

// put sends one admin write with the token and decodes the ModelStatus
// the warden answers with.
func (w writeFlags) put(path string, body any) (adminapi.ModelStatus, error) {
	var st adminapi.ModelStatus
	token, err := agent.ReadAdminToken(w.tokenFile)
	if err != nil {
		return st, err
	}
	base := w.admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + path
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPut, u, bytes.NewReader(b))
	if err != nil {
		return st, fmt.Errorf("%w: --admin %q: %v", errUsage, w.admin, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return st, fmt.Errorf("admin API at %s: %w (is `lmwarden serve` running?)", w.admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(msg, &e) == nil && e.Error != "" {
			msg = []byte(e.Error)
		}
		return st, fmt.Errorf("PUT %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}
