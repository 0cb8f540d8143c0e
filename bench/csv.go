package bench

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// writeCSV writes one row per step and arm, every number of Result, the load
// per replica as columns load_r0, load_r1, ... Empty cells mean no data.
func (r *Report) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"sessions", "arm", "policy", "seconds", "requests", "errors", "timeouts", "cut",
		"sessions_completed", "sessions_per_hour", "output_tokens_per_min",
		"ttft_p50_s", "ttft_p95_s", "session_ttft_p50_s", "session_ttft_p95_s",
		"replicas_busy", "hit_rate", "client_cached_share", "queries_per_prompt_token", "ideal_hit_rate", "counter_resets",
		"stayed", "load_imbalance", "notes"}
	head = append(head, "step", "arrivals_per_min", "load")
	head = append(head, taskCSVHead...)
	for i := range r.Replicas {
		head = append(head, fmt.Sprintf("load_r%d", i))
	}
	for i := range r.Replicas {
		head = append(head, fmt.Sprintf("running_r%d", i), fmt.Sprintf("waiting_r%d", i))
	}
	_ = w.Write(head)
	for _, x := range r.Results {
		row := []string{strconv.Itoa(x.Sessions), x.Arm, r.ArmPolicies[x.Arm], csvNum(x.Seconds),
			strconv.Itoa(x.Requests), strconv.Itoa(x.Errors), strconv.Itoa(x.Timeouts), strconv.Itoa(x.Cut),
			strconv.Itoa(x.Completed), csvNum(x.SessionsPerHour), csvNum(x.OutputTokensPerMin),
			csvNum(x.TTFTP50), csvNum(x.TTFTP95), csvNum(x.SessionTTFTP50), csvNum(x.SessionTTFTP95),
			csvNum(x.ReplicasBusy), csvNum(x.HitRate), csvNum(x.ClientCachedShare), csvNum(x.QueriesPerPromptToken), csvNum(x.IdealHitRate),
			strconv.Itoa(x.CounterResets), csvNum(x.Stayed), csvNum(x.Imbalance), strings.Join(x.Notes, "; ")}
		row = append(row, x.stepCSVRow()...)
		row = append(row, x.TaskStats.csvRow()...)
		for i := range r.Replicas {
			if i < len(x.Load) {
				row = append(row, csvNum(Num(x.Load[i])))
			} else {
				row = append(row, "")
			}
		}
		for i := range r.Replicas {
			if i < len(x.MeanRunning) && i < len(x.MeanWaiting) {
				row = append(row, csvNum(x.MeanRunning[i]), csvNum(x.MeanWaiting[i]))
			} else {
				row = append(row, "", "")
			}
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func csvNum(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return ""
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// taskCSVHead names TaskStats' columns, in csvRow's order.
var taskCSVHead = []string{"task_p50_s", "task_p95_s", "tasks_unfinished", "task_p50_with_unfinished_s",
	"task_p95_with_unfinished_s", "ttft_first_p50_s", "ttft_first_p95_s", "ttft_later_p50_s", "ttft_later_p95_s",
	"subagent_later_cached", "compactions", "parked", "parked_at_close", "parked_p50_s", "parked_p95_s", "parked_max_s",
	"live_context_tokens", "live_context_x"}

func (t TaskStats) csvRow() []string {
	return []string{csvNum(t.TaskP50), csvNum(t.TaskP95), strconv.Itoa(t.TasksUnfinished), csvNum(t.TaskP50Open),
		csvNum(t.TaskP95Open), csvNum(t.TTFTFirstP50), csvNum(t.TTFTFirstP95), csvNum(t.TTFTLaterP50),
		csvNum(t.TTFTLaterP95), csvNum(t.SubagentCached), strconv.Itoa(t.Compactions), strconv.Itoa(t.Parked), strconv.Itoa(t.ParkedAtClose), csvNum(t.ParkedP50),
		csvNum(t.ParkedP95), csvNum(t.ParkedMax), csvNum(t.LiveContext), csvNum(t.LiveContextX)}
}

// stepCSVRow is the step's name, arrival rate (open loop) and load.
func (x Result) stepCSVRow() []string {
	rate, load := Num(math.NaN()), Num(math.NaN())
	if x.Open() {
		rate = Num(x.PerMin)
	}
	if x.CacheLoad > 0 {
		load = Num(x.CacheLoad)
	}
	return []string{x.Step.String(), csvNum(rate), csvNum(load)}
}
