package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
)

// Measuring a running vLLM-compatible replica (`lmwarden sim calibrate`):
// everything is read from the replica's own reports, never timed at the
// client, so the network and the client's clock add nothing. The KV cache,
// block size and memory share come from vllm:cache_config_info, the context
// from GET /v1/models, prefill from the time-to-first-token histogram of
// cold and warm prompts sent one at a time (their sizes from the responses'
// usage, their cache hits from the prefix-cache counters), decode from the
// inter-token-latency histogram at a few contexts and batch sizes. The step
// model of the profile (docs/sim.md) is then fitted to them.

// MeasureConfig says which replica to measure and how.
type MeasureConfig struct {
	URL   string // the replica's base URL
	Model string // the model field of requests (default: the first of GET /v1/models)
	Rank  int    // one rank behind a shared URL (X-data-parallel-rank and the engine label); < 0: none
	// Like supplies what cannot be measured from outside: the model's shape
	// (parameters, layers, KV bytes a token), max_num_seqs, and the vLLM
	// behaviours (scheduler_reserve_full_isl, prefix_stats).
	Like     Profile
	Client   *http.Client
	Progress func(done, total int, what string) // may be nil
}

// Measurement is what Measure saw and the profile fitted to it.
type Measurement struct {
	Profile Profile
	Points  []string // one line a measurement, for the profile file's header
	// ChunkTies: the prefill fit could not tell max_num_batched_tokens
	// from larger values (no prompt was long enough).
	ChunkAtLeast bool
}

// prefillPoint is one request's prefill: n tokens computed on top of ctx
// cached ones, in ttft seconds.
type prefillPoint struct {
	ctx, n int
	ttft   float64
}

var errMeasure = errors.New("sim: calibrate")

// Measure measures the replica and fits a profile to it.
func Measure(ctx context.Context, cfg MeasureConfig) (*Measurement, error) {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Minute}
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	m := &meter{cfg: cfg, nonce: uint64(time.Now().UnixNano())}
	return m.run(ctx)
}

type meter struct {
	cfg   MeasureConfig
	nonce uint64
	seq   uint64
	done  int
	total int
	out   Measurement
}

func (m *meter) progress(what string) {
	m.done++
	if m.cfg.Progress != nil {
		m.cfg.Progress(m.done, m.total, what)
	}
}

func (m *meter) note(format string, args ...any) {
	m.out.Points = append(m.out.Points, fmt.Sprintf(format, args...))
}

func (m *meter) run(ctx context.Context) (*Measurement, error) {
	p := m.cfg.Like
	// 1. what the replica says about itself
	if err := m.readSelf(ctx, &p); err != nil {
		return nil, err
	}
	// what fits: prompts up to half the cache and the context
	limit := min(p.MaxModelLen-64, p.KVCapacityTokens/2)
	var cold []int
	for _, n := range []int{512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288} {
		if n <= limit {
			cold = append(cold, n)
		}
	}
	if len(cold) < 3 {
		return nil, fmt.Errorf("%w: the replica's context (%d tokens) and cache (%d) leave no room for prompts of 512-2048 tokens", errMeasure, p.MaxModelLen, p.KVCapacityTokens)
	}
	short, long := 512, min(8192, limit)
	m.total = len(cold) + 1 + 2 + 2

	// 2. prefill: cold prompts, then one warm
	pf, err := m.measurePrefill(ctx, cold)
	if err != nil {
		return nil, err
	}
	// 3. decode at batch 1, two contexts
	dc, err := m.measureDecode(ctx, short, long)
	if err != nil {
		return nil, err
	}
	if dc.slope <= 0 || pf.a <= 0 || pf.b <= 0 || dc.intercept-pf.o <= 0 {
		return nil, fmt.Errorf("%w: the measurements do not fit the step model (prefill %.3g s/token, %.3g s/pair, overhead %.3g s; decode %.3g s/token of context, %.3g s a step): is the replica busy?",
			errMeasure, pf.a, pf.b, pf.o, dc.slope, dc.intercept)
	}

	// 4. the profile: effective rates (efficiencies 1), the model's shape kept
	m.fitProfile(&p, pf, dc)

	// 5. decode at larger batches, checked against the fitted model
	for _, batch := range []int{4, 8} {
		itl, prompt, err := m.decode(ctx, batch, short, decodeOutTokens)
		if err != nil {
			return nil, err
		}
		var l stepLoad
		for range batch {
			l.add(int(decodeContext(prompt))-1, 1)
		}
		predicted := p.cost(l).Seconds()
		m.note("decode, batch %d: %.5f s/token at a %.0f-token context (the fitted profile predicts %.5f)", batch, itl, prompt, predicted)
		m.progress(fmt.Sprintf("decode, batch %d: %.1f ms/token (fit %.1f)", batch, itl*1e3, predicted*1e3))
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	m.out.Profile = p
	return &m.out, nil
}

// readSelf fills p with what the replica reports about itself: the KV
// cache and block size (vllm:cache_config_info), the model and its context
// (GET /v1/models).
func (m *meter) readSelf(ctx context.Context, p *Profile) error {
	c, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	if c.blockSize < 1 || c.numBlocks < 2 {
		return fmt.Errorf("%w: %s reports no %s with block_size and num_gpu_blocks", errMeasure, m.cfg.URL, vllmmetrics.CacheConfig[0])
	}
	modelID, maxLen, err := m.models(ctx)
	if err != nil {
		return err
	}
	if m.cfg.Model == "" {
		m.cfg.Model = modelID
	}
	p.BlockSize, p.KVCapacityTokens, p.MaxModelLen = c.blockSize, c.numBlocks*c.blockSize, maxLen
	if c.gpuUtil > 0 {
		p.GPUMemoryUtilization = c.gpuUtil
	}
	m.note("vllm:cache_config_info: block_size %d, num_gpu_blocks %d (%d tokens), gpu_memory_utilization %g; /v1/models: %s, max_model_len %d",
		c.blockSize, c.numBlocks, p.KVCapacityTokens, c.gpuUtil, modelID, maxLen)
	if p.MaxModelLen < 1 {
		p.MaxModelLen = p.KVCapacityTokens - p.BlockSize
	}
	return nil
}

// prefillFit is the prefill step model fitted to the measured prompts:
// a s/token, b s per token pair, o s a step, chunks of chunk tokens.
type prefillFit struct {
	chunk   int
	a, b, o float64
}

// measurePrefill sends the cold prompts one at a time, then one warm
// prompt on a cached prefix, and fits the prefill model to their TTFTs.
func (m *meter) measurePrefill(ctx context.Context, cold []int) (prefillFit, error) {
	var points []prefillPoint
	var warmBase string
	for _, n := range cold {
		text := m.words(n)
		pt, err := m.prefill(ctx, text)
		if err != nil {
			return prefillFit{}, err
		}
		points = append(points, pt)
		m.note("cold prompt: %d tokens (%d cached), TTFT %.4f s", pt.n+pt.ctx, pt.ctx, pt.ttft)
		m.progress(fmt.Sprintf("cold prompt of %d tokens: TTFT %.3f s", pt.n+pt.ctx, pt.ttft))
		if n <= 4096 {
			warmBase = text
		}
	}
	warm, err := m.prefill(ctx, warmBase+m.words(1024))
	if err != nil {
		return prefillFit{}, err
	}
	points = append(points, warm)
	m.note("warm prompt: %d tokens (%d cached), TTFT %.4f s", warm.n+warm.ctx, warm.ctx, warm.ttft)
	m.progress(fmt.Sprintf("warm prompt of %d tokens, %d cached: TTFT %.3f s", warm.n+warm.ctx, warm.ctx, warm.ttft))
	if warm.ctx == 0 {
		return prefillFit{}, fmt.Errorf("%w: a repeated prefix was not a cache hit (is prefix caching off?)", errMeasure)
	}
	var f prefillFit
	var atLeast bool
	f.chunk, f.a, f.b, f.o, atLeast, err = fitPrefill(points)
	if err != nil {
		return prefillFit{}, err
	}
	m.out.ChunkAtLeast = atLeast
	return f, nil
}

// decodeOutTokens is how many tokens each decode measurement generates.
const decodeOutTokens = 48

// decodeContext is the mean context a decode step reads for a prompt of
// the given size: the k-th interval (k = 1 .. out-1) reads the KV of
// prompt+k tokens.
func decodeContext(prompt float64) float64 { return prompt + float64(decodeOutTokens)/2 }

// decodeFit is the decode step model: intercept s a step plus slope s per
// token of context.
type decodeFit struct {
	slope, intercept float64
}

// measureDecode decodes at batch 1 after a short and a long prompt and
// fits a line through the two.
func (m *meter) measureDecode(ctx context.Context, short, long int) (decodeFit, error) {
	itlShort, promptShort, err := m.decode(ctx, 1, short, decodeOutTokens)
	if err != nil {
		return decodeFit{}, err
	}
	m.progress(fmt.Sprintf("decode, batch 1, %.0f-token context: %.1f ms/token", promptShort, itlShort*1e3))
	itlLong, promptLong, err := m.decode(ctx, 1, long, decodeOutTokens)
	if err != nil {
		return decodeFit{}, err
	}
	m.progress(fmt.Sprintf("decode, batch 1, %.0f-token context: %.1f ms/token", promptLong, itlLong*1e3))
	slope := (itlLong - itlShort) / (decodeContext(promptLong) - decodeContext(promptShort))
	intercept := itlShort - slope*decodeContext(promptShort)
	m.note("decode, batch 1: %.5f s/token at a %.0f-token context, %.5f at %.0f", itlShort, promptShort, itlLong, promptLong)
	return decodeFit{slope: slope, intercept: intercept}, nil
}

// fitProfile sets p's rates from the fits: effective rates (efficiencies
// 1), the model's shape kept.
func (m *meter) fitProfile(p *Profile, pf prefillFit, dc decodeFit) {
	p.Name, p.Description = "calibrated", "measured from "+m.cfg.URL
	p.GPU = ""
	p.PeakFLOPS, p.ComputeEfficiency = 2*p.Params/pf.a, 1
	p.HiddenSize = int(math.Round(pf.b * p.PeakFLOPS / (4 * float64(p.Layers))))
	p.MemBytesPerSec, p.MemoryEfficiency = p.KVBytesPerToken()/dc.slope, 1
	p.WeightBytes = (dc.intercept - pf.o) * p.MemBytesPerSec
	p.StepOverhead = time.Duration(pf.o * 1e9).Round(time.Microsecond)
	p.MaxNumBatchedTokens = pf.chunk
	p.GPUMemoryBytes, p.ActivationPeakBytes, p.NonTorchBytes, p.CUDAGraphBytes = 0, 0, 0, 0
	// the fit is the three-constant step model; terms fitted to another
	// measurement (h200-qwen3-4b's forward pass) do not carry over
	p.PrefillFloor, p.PrefillContextRate = 0, 0
	m.note("fit: prefill %.4g s/token + %.4g s per token pair + %.4g s a step, chunks of %d; decode %.4g s a step + %.4g s per context token",
		pf.a, pf.b, pf.o, pf.chunk, dc.intercept, dc.slope)
}

// fitPrefill fits TTFT = Σ over chunks of (a·k + b·(k·ctx + k(k+1)/2) + o)
// for each candidate chunk size and keeps the best (linear least squares in
// a, b, o for a given chunk size).
func fitPrefill(points []prefillPoint) (chunk int, a, b, o float64, atLeast bool, err error) {
	best := math.Inf(1)
	var errs []float64
	cands := []int{256, 512, 1024, 2048, 4096, 8192, 16384, 32768}
	for _, c := range cands {
		var rows [][3]float64
		var ys []float64
		for _, pt := range points {
			var f [3]float64
			for done := 0; done < pt.n; {
				k := float64(min(c, pt.n-done))
				ctx := float64(pt.ctx + done)
				f[0] += k
				f[1] += k*ctx + k*(k+1)/2
				f[2]++
				done += int(k)
			}
			rows, ys = append(rows, f), append(ys, pt.ttft)
		}
		x, sse, ok := leastSquares3(rows, ys)
		errs = append(errs, sse)
		if ok && sse < best*(1-1e-9) {
			best, chunk, a, b, o = sse, c, x[0], x[1], x[2]
		}
	}
	if chunk == 0 {
		return 0, 0, 0, 0, false, fmt.Errorf("%w: the prefill times fit no chunk size", errMeasure)
	}
	// a larger chunk with the same error cannot be told apart
	for i, c := range cands {
		if c > chunk && errs[i] <= best*(1+1e-6)+1e-18 {
			atLeast = true
		}
	}
	return chunk, a, b, o, atLeast, nil
}

// leastSquares3 solves the 3-parameter normal equations.
func leastSquares3(rows [][3]float64, ys []float64) ([3]float64, float64, bool) {
	var ata [3][3]float64
	var aty [3]float64
	for r, f := range rows {
		for i := range 3 {
			aty[i] += f[i] * ys[r]
			for j := range 3 {
				ata[i][j] += f[i] * f[j]
			}
		}
	}
	x, ok := solve3(ata, aty)
	if !ok {
		return x, math.Inf(1), false
	}
	var sse float64
	for r, f := range rows {
		d := f[0]*x[0] + f[1]*x[1] + f[2]*x[2] - ys[r]
		sse += d * d
	}
	return x, sse, true
}

// solve3 is Gaussian elimination with partial pivoting.
func solve3(a [3][3]float64, y [3]float64) ([3]float64, bool) {
	for col := range 3 {
		piv := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-300 {
			return [3]float64{}, false
		}
		a[col], a[piv] = a[piv], a[col]
		y[col], y[piv] = y[piv], y[col]
		for r := range 3 {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c < 3; c++ {
				a[r][c] -= f * a[col][c]
			}
			y[r] -= f * y[col]
		}
	}
	return [3]float64{y[0] / a[0][0], y[1] / a[1][1], y[2] / a[2][2]}, true
}

// words is a prompt of n words the replica has never seen (4 bytes each: n
// tokens on the simulator; a real tokenizer's count comes back in usage).
func (m *meter) words(n int) string {
	m.seq++
	var b strings.Builder
	// a header of exactly 8 simulated tokens makes the prompt n of them:
	// sizes that split into whole chunks, no tiny memory-bound step
	fmt.Fprintf(&b, "%-32.32s", fmt.Sprintf("calibrate %x %d:", m.nonce, m.seq))
	d := draws{seed: m.nonce ^ m.seq*0x9e3779b97f4a7c15}
	for range n - 8 {
		b.WriteString(outputWords[d.intn(len(outputWords))])
	}
	return b.String()
}

// prefill sends one prompt (max_tokens 1) and reads its TTFT from the
// replica's histogram, its size from usage and its hit from the counters.
func (m *meter) prefill(ctx context.Context, prompt string) (prefillPoint, error) {
	before, err := m.scrape(ctx)
	if err != nil {
		return prefillPoint{}, err
	}
	usage, err := m.complete(ctx, prompt, 1)
	if err != nil {
		return prefillPoint{}, err
	}
	after, err := m.scrape(ctx)
	if err != nil {
		return prefillPoint{}, err
	}
	if after.ttftCount-before.ttftCount != 1 {
		return prefillPoint{}, fmt.Errorf("%w: %v first tokens counted during one request: the replica is not idle", errMeasure, after.ttftCount-before.ttftCount)
	}
	hit := int(after.hits - before.hits)
	return prefillPoint{ctx: hit, n: usage - hit, ttft: after.ttftSum - before.ttftSum}, nil
}

// decode runs batch requests at once (prompts of about promptTokens
// tokens, out tokens each, never stopping early) and returns the mean
// inter-token latency and the prompts' mean size from usage.
func (m *meter) decode(ctx context.Context, batch, promptTokens, out int) (float64, float64, error) {
	before, err := m.scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	// each prompt is computed once beforehand, so the timed requests start
	// decoding at once (a prompt still in prefill would share their steps)
	prompts := make([]string, batch)
	for i := range prompts {
		prompts[i] = m.words(promptTokens)
		if _, err := m.complete(ctx, prompts[i], 1); err != nil {
			return 0, 0, err
		}
	}
	if before, err = m.scrape(ctx); err != nil {
		return 0, 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, batch)
	sizes := make([]int, batch)
	for i := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sizes[i], errs[i] = m.complete(ctx, prompts[i], out)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	after, err := m.scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	n := after.itlCount - before.itlCount
	if n <= 0 {
		return 0, 0, fmt.Errorf("%w: the replica exports no inter-token latency histogram (%s)", errMeasure, vllmmetrics.ITL[0])
	}
	var mean float64
	for _, sz := range sizes {
		mean += float64(sz) / float64(batch)
	}
	return (after.itlSum - before.itlSum) / n, mean, nil
}

// complete posts a completion and returns the prompt tokens of its usage.
func (m *meter) complete(ctx context.Context, prompt string, maxTokens int) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": m.cfg.Model, "prompt": prompt, "max_tokens": maxTokens,
		"ignore_eos": true, "temperature": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.cfg.URL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if m.cfg.Rank >= 0 {
		req.Header.Set("X-data-parallel-rank", strconv.Itoa(m.cfg.Rank))
	}
	resp, err := m.cfg.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errMeasure, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%w: POST /v1/completions: %s: %s", errMeasure, resp.Status, strings.TrimSpace(string(b)))
	}
	var v struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Usage.PromptTokens < 1 {
		return 0, fmt.Errorf("%w: POST /v1/completions: no usage in %.200s", errMeasure, b)
	}
	return v.Usage.PromptTokens, nil
}

// models reads the served model and its max_model_len.
func (m *meter) models(ctx context.Context) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.URL+"/v1/models", nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := m.cfg.Client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", errMeasure, err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", 0, fmt.Errorf("%w: GET /v1/models: %s, %v", errMeasure, resp.Status, err)
	}
	return list.Data[0].ID, list.Data[0].MaxModelLen, nil
}

// replicaReport is what one /metrics page says.
type replicaReport struct {
	blockSize, numBlocks int
	gpuUtil              float64
	ttftSum, ttftCount   float64
	itlSum, itlCount     float64
	hits                 float64
}

// scrape reads the replica's /metrics (vLLM's names of either generation).
func (m *meter) scrape(ctx context.Context) (replicaReport, error) {
	var r replicaReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.URL+"/metrics", nil)
	if err != nil {
		return r, err
	}
	resp, err := m.cfg.Client.Do(req)
	if err != nil {
		return r, fmt.Errorf("%w: %v", errMeasure, err)
	}
	defer resp.Body.Close()
	fams, err := vllmmetrics.Parse(io.LimitReader(resp.Body, vllmmetrics.MaxBytes), resp.Header)
	if err != nil {
		return r, fmt.Errorf("%w: %s/metrics: %v", errMeasure, m.cfg.URL, err)
	}
	engine := "0"
	if m.cfg.Rank >= 0 {
		engine = strconv.Itoa(m.cfg.Rank)
	}
	// pick returns the series of the measured engine, or the first series
	// when none carries its engine label (a replica of its own)
	pick := func(names []string) []*dto.Metric {
		all := vllmmetrics.Find(fams, names).GetMetric()
		var match []*dto.Metric
		for _, mm := range all {
			if e, ok := vllmmetrics.Label(mm, vllmmetrics.LabelEngine); ok && e == engine {
				match = append(match, mm)
			}
		}
		if len(match) > 0 || len(all) == 0 {
			return match
		}
		return all[:1]
	}
	for _, mm := range pick(vllmmetrics.CacheConfig) {
		c := vllmmetrics.ReadCacheConfig(mm)
		r.blockSize, r.numBlocks, r.gpuUtil = c.BlockSize, c.NumGPUBlocks, c.GPUMemoryUtilization
	}
	for _, mm := range pick(vllmmetrics.TTFT) {
		r.ttftSum, r.ttftCount = vllmmetrics.Histogram(mm)
	}
	for _, mm := range pick(vllmmetrics.ITL) {
		r.itlSum, r.itlCount = vllmmetrics.Histogram(mm)
	}
	for _, mm := range pick(vllmmetrics.PrefixHits) {
		r.hits = vllmmetrics.Value(mm)
	}
	return r, nil
}
