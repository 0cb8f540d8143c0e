package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
)

func init() {
	register("status", "show models and replicas from a running warden's admin API", func(args []string) error {
		return runStatus(args, os.Stdout)
	})
}

// runStatus prints GET /api/v1/models as two aligned tables: models, then
// one row per replica.
func runStatus(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	admin := fs.String("admin", config.DefaultAdmin, "admin address of the running warden (host:port or URL)")
	model := fs.String("model", "", "show only this model")
	asJSON := fs.Bool("json", false, "print the admin API's JSON as is")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var resp adminapi.ModelsResponse
	if err := getAdminJSON(*admin, "/api/v1/models", &resp); err != nil {
		return err
	}
	models := resp.Models[:0]
	for _, m := range resp.Models {
		if *model == "" || m.Name == *model {
			models = append(models, m)
		}
	}
	if *model != "" && len(models) == 0 {
		return fmt.Errorf("no model %q", *model)
	}
	dp := datapathOf(*admin)
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Datapath *datapathStatus `json:"datapath,omitempty"`
			adminapi.ModelsResponse
		}{dp, adminapi.ModelsResponse{Models: models}})
	}
	if dp != nil {
		fmt.Fprintf(out, "DATAPATH  %s (%s)\n\n", dp.Name, dp.Reason)
	}
	printStatus(out, models)
	return nil
}

// datapathStatus is what lmwarden_datapath_info says.
type datapathStatus struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// datapathOf reads the running datapath from the warden's /metrics (nil
// when it does not say: a warden not started by serve).
func datapathOf(admin string) *datapathStatus {
	base := admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(strings.TrimRight(base, "/") + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			return nil
		}
		if mf.GetName() != "lmwarden_datapath_info" || len(mf.GetMetric()) == 0 {
			continue
		}
		var d datapathStatus
		for _, l := range mf.GetMetric()[0].GetLabel() {
			switch l.GetName() {
			case "datapath":
				d.Name = l.GetValue()
			case "reason":
				d.Reason = l.GetValue()
			}
		}
		return &d
	}
}

func printStatus(out io.Writer, models []adminapi.ModelStatus) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tFRONTEND\tAFFINITY\tPOLICY\tSPILL\tSTICKY\tIN-FLIGHT\tSESSIONS\tUNAFFINED\tINVALID-PINS")
	for _, m := range models {
		spill := fmt.Sprint(m.Spill)
		if m.SpillAuto {
			spill += " (auto)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", m.Name, m.Frontend, onOff(m.Affinity),
			m.Effective, spill, share(m), m.InFlight, m.Sessions, m.Unaffined, m.InvalidPins)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "MODEL\tREPLICA\tURL\tHEALTHY\tIN-FLIGHT\tSESSIONS\tSTICKY\tSPILLED-IN\tCLIENT-PINNED\tRUNNING\tWAITING\tKV-USED\tHIT-RATE\tLIVE/BUDGET\tREASON")
	for _, m := range models {
		for _, r := range m.Replicas {
			hit := "-"
			if r.HitRateKnown {
				hit = fmt.Sprintf("%.1f%%", 100*r.PrefixHitRate)
			}
			live := "-"
			if r.Cost != nil {
				live = fmt.Sprintf("%s/%s", kTokens(r.Cost.Live), kTokens(r.Cost.Budget))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%g\t%g\t%.1f%%\t%s\t%s\t%s\n", m.Name, r.Index, r.URL,
				health(r), r.InFlight, r.Sessions, r.Sticky, r.SpilledIn, r.ClientPinned,
				r.Running, r.Waiting, 100*r.KVUsed, hit, live, orDash(r.Reason))
		}
	}
	printAdmission(tw, models)
	tw.Flush()
}

// printAdmission adds a table of cache-capacity admission for the models
// on policy cost or sticky: whether requests wait now, the live load, the parked
// requests and their waits.
func printAdmission(tw io.Writer, models []adminapi.ModelStatus) {
	header := false
	for _, m := range models {
		if m.Cost == nil {
			continue
		}
		if !header {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "MODEL\tADMISSION\tENGAGED\tLIVE-LOAD\tPARKED\tOLDEST-WAIT\tWAIT-P50\tWAIT-P95\tMAX-WAIT\tTIMEOUT\tTIMED-OUT\tREJECTED\tYIELDS")
			header = true
		}
		a := m.Cost.AdmissionState
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%d\t%.1fs\t%s\t%s\t%s\t%gs\t%d\t%d\t%d\n", m.Name, m.Cost.Admission, yesNo(a.Engaged),
			a.LiveLoad, m.Cost.Parked, a.OldestWait, seconds(a.WaitP50), seconds(a.WaitP95), seconds(a.MaxWait), a.Timeout,
			a.TimedOut, a.Rejected, a.Yields)
	}
}

// health is the HEALTHY column: yes, no (the poller's), or draining.
func health(r adminapi.ReplicaStatus) string {
	if r.Draining {
		return "draining"
	}
	return yesNo(r.Healthy)
}

func kTokens(v float64) string { return fmt.Sprintf("%.1fk", v/1000) }

func seconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *v)
}

func share(m adminapi.ModelStatus) string {
	if m.Stayed+m.Moved == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*m.StickyShare)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// getAdminJSON GETs path from the admin API and decodes the JSON body.
// admin is host:port (the --admin flag) or a full http:// URL.
func getAdminJSON(admin, path string, v any) error {
	base := admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(strings.TrimRight(base, "/") + path)
	if err != nil {
		return fmt.Errorf("%w: --admin %q: %v", errUsage, admin, err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u.String())
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is `lmwarden serve` running?)", admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("admin API %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("admin API %s: %w", u, err)
	}
	return nil
}
