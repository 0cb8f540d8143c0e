package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// api is the shape of a request: the two APIs agents speak.
type api string

const (
	anthropic api = "anthropic"
	openai    api = "openai"
)

// result is how one streamed request ended, as its client saw it.
type result struct {
	Session  string
	API      api
	Status   int    // the response's status (0: no response)
	Complete bool   // the stream's own end: message_stop, or data: [DONE]
	ErrEvent string // the API's error event, if the stream carried one
	Events   int    // SSE events read
	Err      error  // the transport's error, if any (a cut stream, a reset)
	Start    time.Time
	First    time.Time // the first body byte
	End      time.Time
	Conn     string // the client connection's local address
}

func (r result) String() string {
	s := fmt.Sprintf("%s %s: status %d, %d events", r.API, r.Session, r.Status, r.Events)
	switch {
	case r.Complete:
		s += ", complete"
	case r.ErrEvent != "":
		s += ", error event " + r.ErrEvent
	}
	if r.Err != nil {
		s += ", err " + r.Err.Error()
	}
	return s + fmt.Sprintf(", after %v", r.End.Sub(r.Start).Round(time.Millisecond))
}

// client sends streamed requests on keep-alive connections of its own.
type client struct {
	hc *http.Client
	mu sync.Mutex
	// local is the local address of the connection each request went on.
	local string
	// onFirst, if set, is called when a stream's first body byte arrives.
	onFirst func()
}

func newClient(timeout time.Duration) *client {
	c := &client{}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c.hc = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 4,
			DisableCompression:  true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, addr)
				if err == nil {
					c.mu.Lock()
					c.local = conn.LocalAddr().String()
					c.mu.Unlock()
				}
				return conn, err
			},
		},
	}
	return c
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// body is a request body of the API's shape that asks for a stream of
// maxTokens tokens.
func body(a api, session string, maxTokens int) []byte {
	msgs := []map[string]string{{"role": "user", "content": "fault suite turn of " + session + ": " + strings.Repeat("context ", 64)}}
	b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": maxTokens, "stream": true, "messages": msgs})
	return b
}

// stream sends one streamed turn of session and reads it to its end.
func (c *client) stream(ctx context.Context, a api, session string, maxTokens int) (r result) {
	r = result{Session: session, API: a, Start: time.Now()}
	defer func() { r.End = time.Now() }()
	path, header := "/v1/messages", "X-Claude-Code-Session-Id"
	if a == openai {
		path, header = "/v1/chat/completions", "X-Session-Id"
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+frontend+path, strings.NewReader(string(body(a, session, maxTokens))))
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, session)
	resp, err := c.hc.Do(req)
	c.mu.Lock()
	r.Conn = c.local
	c.mu.Unlock()
	if err != nil {
		r.Err = err
		r.End = time.Now()
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return r
	}
	br := bufio.NewReader(resp.Body)
	event := ""
	for {
		line, err := br.ReadString('\n')
		if r.First.IsZero() && len(line) > 0 {
			r.First = time.Now()
			if c.onFirst != nil {
				c.onFirst()
			}
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data := strings.TrimSpace(line[len("data:"):])
			r.Events++
			switch {
			case event == "error" || strings.HasPrefix(data, `{"error"`):
				r.ErrEvent = errorMessage(data)
			case event == "message_stop" || data == "[DONE]":
				r.Complete = true
			}
		case line == "":
			event = ""
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.Err = err
			}
			return r
		}
	}
}

// errorMessage is the message of an error event's JSON (Anthropic's
// {"type":"error","error":{...}} or OpenAI's {"error":{...}}).
func errorMessage(data string) string {
	var v struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &v) != nil || v.Error.Message == "" {
		return "unparsed: " + data
	}
	return v.Error.Type + ": " + v.Error.Message
}

// load runs n sessions that stream turn after turn until stop is closed,
// each on its own keep-alive connections (odd sessions speak OpenAI's API).
func load(n, maxTokens int, prefix string, stop <-chan struct{}) *loadRun {
	l := &loadRun{streaming: map[string]bool{}}
	for i := range n {
		l.wg.Go(func() {
			c := newClient(2 * time.Minute)
			defer c.close()
			a := anthropic
			if i%2 == 1 {
				a = openai
			}
			session := fmt.Sprintf("%s-%d", prefix, i)
			c.onFirst = func() {
				l.mu.Lock()
				l.streaming[session] = true
				l.mu.Unlock()
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := c.stream(context.Background(), a, session, maxTokens)
				l.mu.Lock()
				l.all = append(l.all, r)
				delete(l.streaming, session)
				l.mu.Unlock()
			}
		})
	}
	return l
}

// loadRun is a running load: the turns its sessions have done, and which
// of them are streaming now (a response's first byte arrived, its end not
// yet), which is what a test waits on before it breaks something.
type loadRun struct {
	wg        sync.WaitGroup
	mu        sync.Mutex
	all       []result
	streaming map[string]bool
}

// results waits for every session to stop (close the load's stop first)
// and returns all their turns.
func (l *loadRun) results() []result {
	l.wg.Wait()
	return l.all
}

// sofar returns the turns that have ended until now.
func (l *loadRun) sofar() []result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// streams returns the sessions streaming now, sorted.
func (l *loadRun) streams() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.streaming))
}
