package sim

import (
	"encoding/json"
	"errors"

	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body (Claude Code sends ~50 KB to a few MB).
const maxBodyBytes = 32 << 20

// flushInterval is how long a stream gathers tokens before one write: at
// speed 20 a replica emits a token every 2-7 ms of wall time, and one
// syscall per token would cost more CPU than the whole simulation. The first
// token is written at once so time to first token is not delayed.
const flushInterval = 20 * time.Millisecond

// handler serves one listener: replica fixed, or any rank (fixed < 0).
func (s *Servers) handler(fixed int, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	serveAPI := func(kind apiKind) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, kind, fixed) }
	}
	mux.HandleFunc("POST /v1/messages", serveAPI(apiAnthropic))
	mux.HandleFunc("POST /v1/chat/completions", serveAPI(apiChat))
	mux.HandleFunc("POST /v1/completions", serveAPI(apiCompletions))
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"detail":"Not Found"}`)
	})
	return mux
}

func (s *Servers) serveModels(w http.ResponseWriter, _ *http.Request) {
	writeAPIJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.Model, "object": "model", "created": Epoch.Unix(), "owned_by": "vllm",
			"root": s.cfg.Model, "parent": nil, "max_model_len": s.cfg.Profile.MaxModelLen,
		}},
	})
}

// serveGenerate decodes a request, runs it on a replica and answers in the
// API's own shape, streaming or not.
func (s *Servers) serveGenerate(w http.ResponseWriter, r *http.Request, kind apiKind, fixed int) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, kind, http.StatusBadRequest, badRequest("reading body: %v", err))
		return
	}
	var req *parsedRequest
	switch kind {
	case apiAnthropic:
		req, err = decodeAnthropic(body)
	case apiChat:
		req, err = decodeChat(body)
	default:
		req, err = decodeCompletions(body)
	}
	if err != nil {
		writeError(w, kind, http.StatusBadRequest, err)
		return
	}
	prompt := req.tokens()
	if err := fitContext(req, len(prompt), s.cfg.Profile.ContextLimit()); err != nil {
		writeError(w, kind, http.StatusBadRequest, err)
		return
	}
	replica := fixed
	if replica < 0 {
		if replica, err = s.pickRank(r.Header.Get("X-data-parallel-rank")); err != nil {
			writeError(w, kind, http.StatusBadRequest, err)
			return
		}
	}
	if req.model == "" {
		req.model = s.cfg.Model
	}

	id := s.nextID.Add(1)
	var plan replyPlan
	if !req.ignoreEOS {
		plan = s.cfg.Replies.plan(outputSeed(prompt), req.tools, req.choice, req.minTokens)
	}
	sink := newTokenSink()
	er := &Request{
		ID: id, Prompt: prompt, MaxTokens: req.maxTokens, Stop: req.stop, Reply: plan.text,
		OnToken: sink.token, OnDone: sink.done,
	}
	s.pacer.do(func(v *Virtual) { v.Submit(replica, er) })

	out := newResponder(kind, req, id, len(prompt), plan, !s.cfg.NoPromptTokensDetails)
	if req.stream {
		if s.stream(w, r, sink, out, replica, id) {
			s.observe(replica, kind, req, out, sink.result(), r.Header)
		}
		return
	}
	select {
	case <-sink.finished:
	case <-r.Context().Done():
		s.pacer.do(func(v *Virtual) { v.Abort(replica, id) })
		return
	}
	res := sink.result()
	if res.Err != nil {
		writeError(w, kind, http.StatusInternalServerError, res.Err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out.whole(res))
	s.observe(replica, kind, req, out, res, r.Header)
}

// observe tells ServerConfig.OnRequest about an answered request.
func (s *Servers) observe(replica int, kind apiKind, req *parsedRequest, out *responder, res Result, hdr http.Header) {
	if s.cfg.OnRequest == nil || res.Err != nil {
		return
	}
	rec := RequestRecord{Replica: replica, Model: req.model, Stream: req.stream, Header: hdr.Clone(),
		PromptTokens: res.PromptTokens, CachedTokens: res.CachedTokens, OutputTokens: res.OutputTokens}
	switch kind {
	case apiAnthropic:
		rec.API = "anthropic"
		rec.StopReason, _ = out.anthropicStop(res)
	case apiChat:
		rec.API = "chat"
		rec.StopReason = out.openAIFinish(res)
	default:
		rec.API = "completions"
		rec.StopReason = res.FinishReason
	}
	if out.plan.complete(res) {
		rec.ToolCall = out.plan.call.name
	}
	s.cfg.OnRequest(rec)
}

// fitContext checks the prompt and max_tokens against the context as vLLM's
// serving layer does (and with its messages); an OpenAI request without
// max_tokens gets the rest of the context.
func fitContext(req *parsedRequest, prompt, limit int) error {
	if prompt >= limit {
		return badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", limit, prompt)
	}
	if req.maxTokens == 0 {
		req.maxTokens = limit - prompt
	}
	if prompt+req.maxTokens > limit {
		return badRequest("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			req.maxTokens, limit, prompt, req.maxTokens, limit, prompt)
	}
	return nil
}

// stream writes SSE events as tokens come, gathering them for flushInterval
// between writes, and aborts the request when the client goes away. It
// reports whether the whole response went out.
func (s *Servers) stream(w http.ResponseWriter, r *http.Request, sink *tokenSink, out *responder, replica int, id uint64) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	ctx := r.Context()
	abort := func() { s.pacer.do(func(v *Virtual) { v.Abort(replica, id) }) }
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var buf []byte
	for {
		pieces, res, done := sink.take()
		if len(pieces) == 0 && !done {
			select {
			case <-sink.notify:
				continue
			case <-ctx.Done():
				abort()
				return false
			}
		}
		buf = buf[:0]
		for _, p := range pieces {
			buf = out.delta(buf, p)
		}
		if done {
			buf = out.end(buf, res, res.CachedTokens)
		}
		if _, err := w.Write(buf); err != nil {
			if !done {
				abort()
			}
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		if done {
			return res.Err == nil
		}
		timer.Reset(flushInterval)
		select {
		case <-timer.C:
		case <-ctx.Done():
			abort()
			return false
		}
	}
}

// tokenSink receives a request's engine callbacks (on the driver goroutine)
// and hands them to the HTTP goroutine.
type tokenSink struct {
	mu       sync.Mutex
	pieces   []string
	res      Result
	isDone   bool
	notify   chan struct{} // a piece or the end arrived while the sink was empty
	finished chan struct{} // closed at the end
}

func newTokenSink() *tokenSink {
	return &tokenSink{notify: make(chan struct{}, 1), finished: make(chan struct{})}
}

func (k *tokenSink) signal() {
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

func (k *tokenSink) token(_ time.Time, text string) {
	k.mu.Lock()
	k.pieces = append(k.pieces, text)
	first := len(k.pieces) == 1
	k.mu.Unlock()
	if first {
		k.signal()
	}
}

func (k *tokenSink) done(_ time.Time, r Result) {
	k.mu.Lock()
	k.res, k.isDone = r, true
	k.mu.Unlock()
	close(k.finished)
	k.signal()
}

// take returns what arrived since the last take.
func (k *tokenSink) take() (pieces []string, res Result, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pieces, k.pieces = k.pieces, nil
	return pieces, k.res, k.isDone
}

func (k *tokenSink) result() Result {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.res
}

// writeAPIJSON writes a body of the simulated model API compact, as vLLM's
// server does; the admin API's indented, no-store bodies are
// adminapi.WriteJSON's, which the simulator does not link.
func writeAPIJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError answers in the API's own error shape.
func writeError(w http.ResponseWriter, kind apiKind, status int, err error) {
	msg := err.Error()
	if errors.Is(err, errBadRequest) {
		msg = msg[len(errBadRequest.Error())+2:]
	}
	if kind == apiAnthropic {
		typ := "invalid_request_error"
		if status >= 500 {
			typ = "api_error"
		}
		writeAPIJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
		return
	}
	typ := "BadRequestError"
	if status >= 500 {
		typ = "InternalServerError"
	}
	writeAPIJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": status,
	}})
}
