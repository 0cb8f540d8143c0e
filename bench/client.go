package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// The two request shapes the bench speaks.
const (
	APIAnthropic = "anthropic" // POST /v1/messages, SSE events
	APIOpenAI    = "openai"    // POST /v1/chat/completions, stream + include_usage
)

// SessionHeader carries the session id on every request, as Claude Code does.
const SessionHeader = "X-Claude-Code-Session-Id"

// AgentHeader carries a Claude Code subagent's own id (16 hex digits) on
// its requests, beside its parent's session id.
const AgentHeader = "x-claude-code-agent-id"

// turnHeaders are the conversation's ids a request carries ("": none).
type turnHeaders struct{ Session, Agent string }

// ParkedHeader is the response header in which the warden says how long a
// request waited for admission before it was placed, in seconds (only on
// requests that waited).
const ParkedHeader = "X-Warden-Parked-Seconds" // http1.ParkedHeader

// turnResult is what the client saw of one streamed turn.
type turnResult struct {
	ttft          time.Duration // request start to the first content token; < 0 if none
	parked        time.Duration // the warden's ParkedHeader: wait at admission (0: none)
	text          string
	promptTokens  int
	cachedTokens  int
	outputTokens  int
	status        int
	streamed      bool
	finishedClean bool
}

// newHTTPClient returns a client for the bench: plain TCP (no MPTCP, so
// the warden may hand the accepted socket to a sockmap), keep-alive pool
// large enough for every session, no overall timeout (each request has its
// own context).
func newHTTPClient(conns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	d.SetMultipathTCP(false)
	return &http.Client{Transport: &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        conns + 8,
		MaxIdleConnsPerHost: conns + 8,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
}

// streamTurn sends one turn and reads the stream to its end.
func streamTurn(ctx context.Context, c *http.Client, api, target, model string, ids turnHeaders, system string, msgs []sim.Message, maxTokens int) (turnResult, error) {
	res := turnResult{ttft: -1}
	body, path := requestBody(api, model, system, msgs, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+path, bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if ids.Session != "" {
		req.Header.Set(SessionHeader, ids.Session)
	}
	if ids.Agent != "" {
		req.Header.Set(AgentHeader, ids.Agent)
	}
	if api == APIAnthropic {
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("x-api-key", "bench")
	} else {
		req.Header.Set("Authorization", "Bearer bench")
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	if v, err := strconv.ParseFloat(resp.Header.Get(ParkedHeader), 64); err == nil && v > 0 && v < math.MaxInt64/1e9 {
		res.parked = time.Duration(v * float64(time.Second))
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return res, fmt.Errorf("%w: HTTP %s: %s", ErrRequestFail, resp.Status, strings.TrimSpace(string(msg)))
	}
	var text strings.Builder
	onText := func(t string) {
		if t == "" {
			return
		}
		if res.ttft < 0 {
			res.ttft = time.Since(start)
		}
		text.WriteString(t)
	}
	if api == APIAnthropic {
		err = readAnthropicStream(resp.Body, &res, onText)
	} else {
		err = readOpenAIStream(resp.Body, &res, onText)
	}
	res.text = text.String()
	if err != nil {
		return res, err
	}
	if !res.finishedClean {
		return res, fmt.Errorf("%w: stream ended early", ErrRequestFail)
	}
	if res.ttft < 0 {
		return res, ErrNoFirstToken
	}
	return res, nil
}

// requestBody is one turn's body. Every turn asks for exactly its
// max_tokens with vLLM's ignore_eos sampling flag (the simulator honours it
// on both APIs; a real vLLM on its OpenAI endpoints), so the workload's
// output sizes do not depend on where a model would have stopped.
func requestBody(api, model, system string, msgs []sim.Message, maxTokens int) ([]byte, string) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	if api == APIAnthropic {
		ms := make([]msg, len(msgs))
		for i, m := range msgs {
			ms[i] = msg{m.Role, m.Content}
		}
		b, _ := json.Marshal(map[string]any{
			"model": model, "max_tokens": maxTokens, "stream": true, "system": system, "messages": ms,
			"ignore_eos": true,
		})
		return b, "/v1/messages"
	}
	ms := make([]msg, 0, len(msgs)+1)
	ms = append(ms, msg{"system", system})
	for _, m := range msgs {
		ms = append(ms, msg{m.Role, m.Content})
	}
	b, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": maxTokens, "stream": true, "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true}, "messages": ms,
	})
	return b, "/v1/chat/completions"
}

// sseData calls fn with each event's data payload (the event name comes
// along for Anthropic's named events).
func sseData(r io.Reader, fn func(event, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			event = ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			if err := fn(event, strings.TrimSpace(line[len("data:"):])); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

func readAnthropicStream(r io.Reader, res *turnResult, onText func(string)) error {
	return sseData(r, func(_, data string) error {
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage anthropicUsage `json:"usage"`
			} `json:"message"`
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
			Usage *anthropicUsage `json:"usage"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("%w: bad SSE data: %v", ErrRequestFail, err)
		}
		switch ev.Type {
		case "message_start":
			res.streamed = true
			u := ev.Message.Usage
			res.promptTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
			res.cachedTokens = u.CacheReadInputTokens
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" {
				onText(ev.Delta.Text)
			}
		case "message_delta":
			if ev.Usage != nil {
				res.outputTokens = ev.Usage.OutputTokens
				if ev.Usage.InputTokens+ev.Usage.CacheReadInputTokens > 0 {
					res.promptTokens = ev.Usage.InputTokens + ev.Usage.CacheReadInputTokens + ev.Usage.CacheCreationInputTokens
					res.cachedTokens = ev.Usage.CacheReadInputTokens
				}
			}
		case "message_stop":
			res.finishedClean = true
		case "error":
			msg := "error event"
			if ev.Error != nil {
				msg = ev.Error.Type + ": " + ev.Error.Message
			}
			return fmt.Errorf("%w: %s", ErrRequestFail, msg)
		}
		return nil
	})
}

// anthropicUsage: input_tokens counts the prompt tokens not read from the
// cache, so the prompt is the sum of the three.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func readOpenAIStream(r io.Reader, res *turnResult, onText func(string)) error {
	return sseData(r, func(_, data string) error {
		if data == "[DONE]" {
			res.finishedClean = true
			return nil
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return fmt.Errorf("%w: bad SSE data: %v", ErrRequestFail, err)
		}
		if ch.Error != nil {
			return fmt.Errorf("%w: %s", ErrRequestFail, ch.Error.Message)
		}
		res.streamed = true
		for _, c := range ch.Choices {
			onText(c.Delta.Content)
		}
		if u := ch.Usage; u != nil {
			res.promptTokens, res.outputTokens = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil {
				res.cachedTokens = u.PromptTokensDetails.CachedTokens
			}
		}
		return nil
	})
}

// modelName asks the target which model it serves (GET /v1/models), and
// its context (vLLM's max_model_len; 0 when not listed).
func modelName(ctx context.Context, c *http.Client, target string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(target, "/")+"/v1/models", nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", 0, fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 {
		return "", 0, fmt.Errorf("GET /v1/models: no models")
	}
	return list.Data[0].ID, list.Data[0].MaxModelLen, nil
}
