package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/maps"
)

func init() {
	register("sessions", "list live conversations (keyed hashes only), subagents under their sessions, from a running warden", func(args []string) error {
		return runSessions(args, os.Stdout)
	})
}

// sessionsFlags are the flags of `lmwarden sessions`; a source other than
// the admin API (the pinned BPF map, say) adds its flag here and fills the
// same rows.
type sessionsFlags struct {
	admin    string
	model    string
	limit    int
	asJSON   bool
	fromMaps bool
	pinDir   string
	// id, agent: a raw session (and agent) id to look up, hashed here
	// (sessions_lookup.go) with the key of keyFile or configFile.
	id, agent, keyFile, configFile string
}

func runSessions(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	var f sessionsFlags
	fs.StringVar(&f.admin, "admin", config.DefaultAdmin, "admin address of the running warden (host:port or URL)")
	fs.StringVar(&f.model, "model", "", "list only this model's sessions")
	fs.IntVar(&f.limit, "limit", 100, "list at most this many, newest first (0: all)")
	fs.BoolVar(&f.asJSON, "json", false, "print the admin API's JSON as is")
	fs.BoolVar(&f.fromMaps, "from-maps", false, "read the pinned BPF map (lmw_sessions under --pin-dir) directly, without the admin API (no model names)")
	fs.StringVar(&f.pinDir, "pin-dir", maps.DefaultDir, "the kernel datapath's pinned state, as serve --pin-dir: --from-maps reads its sessions, --id its hash key")
	fs.StringVar(&f.id, "id", "", "show only the conversation of this raw session id (and its subagents): hashed here with the warden's key, never sent")
	fs.StringVar(&f.agent, "agent", "", "with --id: the subagent of this raw agent id")
	fs.StringVar(&f.keyFile, "hash-key-file", "", "with --id: the warden's session-hash key (32 hex digits), as its hash_key_file")
	fs.StringVar(&f.configFile, "config", "", "with --id: the warden's configuration, for its hash_key or hash_key_file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.limit < 0 {
		return fmt.Errorf("%w: --limit must be >= 0", errUsage)
	}
	if f.id == "" && (f.agent != "" || f.keyFile != "" || f.configFile != "") {
		return fmt.Errorf("%w: --agent, --hash-key-file and --config go with --id", errUsage)
	}
	var hash string
	if f.id != "" {
		var err error
		if hash, err = lookupHash(f); err != nil {
			return err
		}
		f.limit = 0 // the conversation may be anywhere in the table
	}
	var resp adminapi.SessionsResponse
	var err error
	if f.fromMaps {
		resp, err = sessionsFromMaps(f.pinDir, f.limit)
	} else {
		resp, err = sessionsFromAdmin(f)
	}
	if err != nil {
		return err
	}
	if hash != "" {
		resp = onlyConversation(resp, hash)
		if len(resp.Sessions) == 0 && !f.asJSON {
			return fmt.Errorf("no live conversation %s (the hash of that id with the warden's key): it ended, expired, or the key is not the warden's", hash)
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(resp)
	}
	printSessions(out, resp, time.Now())
	return nil
}

// sessionsFromAdmin reads the sessions page by page (the API gives at
// most adminapi.SessionsPageMax at a time) until --limit or the last.
func sessionsFromAdmin(f sessionsFlags) (adminapi.SessionsResponse, error) {
	q := url.Values{}
	if f.model != "" {
		q.Set("model", f.model)
	}
	var all adminapi.SessionsResponse
	for {
		page := adminapi.SessionsPageMax
		if f.limit > 0 {
			page = min(page, f.limit-len(all.Sessions))
		}
		q.Set("limit", strconv.Itoa(page))
		var resp adminapi.SessionsResponse
		if err := getAdminJSON(f.admin, "/api/v1/sessions?"+q.Encode(), &resp); err != nil {
			return all, err
		}
		all.Total = resp.Total
		all.Sessions = append(all.Sessions, resp.Sessions...)
		if resp.Next == "" || len(resp.Sessions) == 0 || (f.limit > 0 && len(all.Sessions) >= f.limit) {
			return all, nil
		}
		q.Set("after", resp.Next)
	}
}

// printSessions writes one aligned row per conversation, each subagent
// under the conversation it belongs under (indented), and a count line.
func printSessions(out io.Writer, resp adminapi.SessionsResponse, now time.Time) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tSESSION-HASH\tKIND\tREPLICA\tTURNS\tLAST-SEEN\tIDLE")
	kinds := map[string]int{}
	for _, r := range conversationTree(resp.Sessions) {
		s := r.info
		kinds[s.Kind]++
		idle := now.Sub(s.LastSeen).Truncate(time.Second)
		if idle < 0 {
			idle = 0
		}
		hash := strings.Repeat("  ", r.depth) + s.Hash
		if r.depth > 0 {
			hash = strings.Repeat("  ", r.depth-1) + "└ " + s.Hash
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Model, hash, orDash(s.Kind), s.Replica, s.Turns,
			s.LastSeen.Local().Format(time.DateTime), idle)
	}
	tw.Flush()
	fmt.Fprintf(out, "%d of %d live sessions (conversations: %d main, %d subagents, %d keyed by the body)\n",
		len(resp.Sessions), resp.Total, kinds["session"]+kinds[""], kinds["subagent"], kinds["body"])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// treeRow is a conversation and how deep it sits under others.
type treeRow struct {
	info  adminapi.SessionInfo
	depth int
}

// conversationTree orders conversations so that each is followed by the
// ones that belong under it (a session's subagents, an agent's own
// subagents), in their given order otherwise; a subagent whose parent is
// not listed (expired, or past the limit) stands on its own.
func conversationTree(list []adminapi.SessionInfo) []treeRow {
	listed := map[string]bool{}
	children := map[string][]int{}
	for _, s := range list {
		listed[s.Model+"/"+s.Hash] = true
	}
	var roots []int
	for i, s := range list {
		if p := s.Model + "/" + s.Parent; s.Parent != "" && listed[p] && s.Parent != s.Hash {
			children[p] = append(children[p], i)
		} else {
			roots = append(roots, i)
		}
	}
	out := make([]treeRow, 0, len(list))
	seen := make([]bool, len(list))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if seen[i] {
			return
		}
		seen[i] = true
		out = append(out, treeRow{list[i], depth})
		for _, c := range children[list[i].Model+"/"+list[i].Hash] {
			walk(c, depth+1)
		}
	}
	for _, i := range roots {
		walk(i, 0)
	}
	for i := range list { // a cycle of parents: each on its own
		walk(i, 0)
	}
	return out
}
