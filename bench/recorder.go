package bench

import (
	"fmt"
	"math"
	"sort"
)

// recorder collects one step-arm window's observations, from either runner,
// and turns them into a Result. Not safe for concurrent use; the real runner
// guards it with a mutex.
type recorder struct {
	replicas int
	// requestsPerSession is the workload's mean requests a session, the
	// unit of sessions/h (TurnsPerSession unless a runner says otherwise).
	requestsPerSession float64

	requests, errors, timeouts, cut, completed int
	compactions                                int // compaction requests answered
	outputTokens, promptTokens, cachedTokens   int

	ttft       []float64
	perSession map[string][]float64
	turns      []TurnTokens

	// placement, when the runner knows the replica of each request
	placedOn    []float64
	lastReplica map[string]int
	stayed      int
	moved       int
	knowsPlace  bool
	// load from the replicas' own counters, when placement is not known:
	// finished requests, or generated tokens where those are not exported
	requestCounters []*Counter
	genCounters     []*Counter

	busy            []float64 // per poll: replicas with running requests
	runSum, waitSum []float64 // per replica: sums of running and waiting over polls
	polls           []int     // per replica: polls read
	hits, queries   []*Counter
	errorKinds      map[string]int
	firstErrorText  string

	tasks *taskView // sessions, first and later turns, parked requests (tasks.go)
}

func newRecorder(replicas int) *recorder {
	r := &recorder{
		replicas:           replicas,
		requestsPerSession: TurnsPerSession,
		perSession:         map[string][]float64{},
		placedOn:           make([]float64, replicas),
		lastReplica:        map[string]int{},
		errorKinds:         map[string]int{},
		runSum:             make([]float64, replicas),
		waitSum:            make([]float64, replicas),
		polls:              make([]int, replicas),
		tasks:              newTaskView(replicas),
	}
	for range replicas {
		r.hits = append(r.hits, &Counter{})
		r.queries = append(r.queries, &Counter{})
		r.requestCounters = append(r.requestCounters, &Counter{})
		r.genCounters = append(r.genCounters, &Counter{})
	}
	return r
}

// placed records that a session's request went to a replica.
func (r *recorder) placed(session string, replica int) {
	if replica < 0 || replica >= r.replicas {
		return
	}
	r.knowsPlace = true
	r.placedOn[replica]++
	if last, ok := r.lastReplica[session]; ok {
		if last == replica {
			r.stayed++
		} else {
			r.moved++
		}
	}
	r.lastReplica[session] = replica
}

// answered records a request answered within the window; first: it was
// its session's first request.
func (r *recorder) answered(session string, first bool, ttftSec float64, prompt, cached, output int, reused int) {
	r.requests++
	r.tasks.turn(first, ttftSec)
	r.outputTokens += output
	r.promptTokens += prompt
	r.cachedTokens += cached
	if !math.IsNaN(ttftSec) {
		r.ttft = append(r.ttft, ttftSec)
		r.perSession[session] = append(r.perSession[session], ttftSec)
	}
	if prompt > 0 {
		r.turns = append(r.turns, TurnTokens{Prompt: prompt, Reused: reused})
	}
}

// failed records a failed request; kind names the failure for the notes.
func (r *recorder) failed(kind string, timeout bool, err error) {
	if timeout {
		r.timeouts++
	} else {
		r.errors++
	}
	r.errorKinds[kind]++
	if r.firstErrorText == "" && err != nil {
		r.firstErrorText = err.Error()
	}
}

// poll records one sample of every replica's counters and running count.
// A replica that could not be read is passed as nil and skipped.
func (r *recorder) poll(samples []*replicaSample) {
	busy := 0
	for i, s := range samples {
		if s == nil || i >= r.replicas {
			continue
		}
		if s.Running > 0 {
			busy++
		}
		r.runSum[i] += s.Running
		r.waitSum[i] += s.Waiting
		r.polls[i]++
		r.hits[i].Observe(s.PrefixHits)
		r.queries[i].Observe(s.PrefixQueries)
		r.requestCounters[i].Observe(s.RequestsDone)
		r.genCounters[i].Observe(s.GenerationTokens)
		r.tasks.kvSample(i, s.KVCapacity)
	}
	r.busy = append(r.busy, float64(busy))
}

// replicaSample is what both runners read from a replica.
type replicaSample struct {
	Running, Waiting          float64
	PrefixQueries, PrefixHits float64
	RequestsDone              float64
	GenerationTokens          float64
	KVCapacity                float64 // tokens (vllm:cache_config_info); 0 when not exported
}

// result computes the Result of the window.
func (r *recorder) result(step Step, arm string, seconds float64, sysTokens int) Result {
	res := Result{
		Step: step, Arm: arm, Seconds: Num(seconds),
		Requests: r.requests, Errors: r.errors, Timeouts: r.timeouts, Cut: r.cut, Completed: r.completed,
		TaskStats:      TaskStats{Compactions: r.compactions},
		TTFTP50:        Num(Percentile(r.ttft, 50)),
		TTFTP95:        Num(Percentile(r.ttft, 95)),
		TTFTMean:       Num(Mean(r.ttft)),
		TTFTP90:        Num(Percentile(r.ttft, 90)),
		TTFTP99:        Num(Percentile(r.ttft, 99)),
		SessionTTFTP50: Num(SessionPercentile(r.perSession, 50)),
		SessionTTFTP95: Num(SessionPercentile(r.perSession, 95)),
		ReplicasBusy:   Num(Mean(r.busy)),
		HitRate:        Num(HitRate(r.hits, r.queries)),
		IdealHitRate:   Num(math.NaN()),
		Stayed:         Num(math.NaN()),
	}
	if seconds > 0 {
		// Whole sessions finished in a window are few and lumpy (a 3-minute
		// window at overload may finish none), so the rate counts answered
		// requests in session units; Completed keeps the whole-session count.
		res.SessionsPerHour = Num(float64(r.requests) / r.requestsPerSession / seconds * 3600)
		res.OutputTokensPerMin = Num(float64(r.outputTokens) / seconds * 60)
	}
	res.ClientCachedShare = Num(math.NaN())
	res.QueriesPerPromptToken = Num(math.NaN())
	if r.promptTokens > 0 {
		res.ClientCachedShare = Num(float64(r.cachedTokens) / float64(r.promptTokens))
		var q float64
		for _, c := range r.queries {
			q += c.Increase()
		}
		res.QueriesPerPromptToken = Num(q / float64(r.promptTokens))
		res.IdealHitRate = Num(IdealHitRate(r.turns, sysTokens, r.replicas))
	}
	for _, c := range r.hits {
		res.CounterResets += c.Resets()
	}
	for _, c := range r.queries {
		res.CounterResets += c.Resets()
	}
	load := r.placedOn
	if !r.knowsPlace {
		load = make([]float64, r.replicas)
		var total float64
		for i, c := range r.requestCounters {
			load[i] = c.Increase()
			total += load[i]
		}
		if total == 0 {
			for i, c := range r.genCounters {
				load[i] = c.Increase()
			}
		}
	}
	res.Load = Shares(load)
	for i := range r.replicas {
		run, wait := math.NaN(), math.NaN()
		if r.polls[i] > 0 {
			run, wait = r.runSum[i]/float64(r.polls[i]), r.waitSum[i]/float64(r.polls[i])
		}
		res.MeanRunning = append(res.MeanRunning, Num(run))
		res.MeanWaiting = append(res.MeanWaiting, Num(wait))
	}
	res.Imbalance = Num(Imbalance(load))
	r.tasks.fill(&res, seconds)
	if r.stayed+r.moved > 0 {
		res.Stayed = Num(float64(r.stayed) / float64(r.stayed+r.moved))
	}
	if res.Failed() {
		note := fmt.Sprintf("FAILED: %d errors, %d timeouts of %d requests", r.errors, r.timeouts,
			r.requests+r.errors+r.timeouts)
		kinds := make([]string, 0, len(r.errorKinds))
		for k := range r.errorKinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			note += fmt.Sprintf("; %s ×%d", k, r.errorKinds[k])
		}
		if r.firstErrorText != "" {
			note += "; first: " + r.firstErrorText
		}
		res.Notes = append(res.Notes, note)
	}
	if res.CounterResets > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d replica counter resets (restarts) handled", res.CounterResets))
	}
	return res
}
