// Package pickertest is the gateway side of the endpoint picker protocol,
// for tests and benchmarks: an HTTP front that asks an ext_proc server
// where each request goes, as an Envoy-based gateway that implements the
// Gateway API Inference Extension does, and moves the bytes there. It is
// written from the ext_proc and endpoint picker specifications; it is not
// Envoy, and it does only what those exchanges need:
//
//   - one ext_proc stream per HTTP request; the first message carries the
//     protocol configuration (the body modes);
//   - request headers (lower-cased names, the pseudo-headers :method,
//     :path, :authority, :scheme; end_of_stream when there is no body), and
//     the subset hint in the metadata context when one is set;
//   - the request body as the mode asks: NONE (not sent), BUFFERED (once,
//     whole), STREAMED (chunk by chunk, each answered before the next), or
//     FULL_DUPLEX_STREAMED (chunks sent without waiting; what goes upstream
//     is what the processor sends back);
//   - the pick read from the x-gateway-destination-endpoint header the
//     processor sets, checked against the envoy.lb dynamic metadata (they
//     must agree), and the endpoints tried in order while a connection is
//     refused (Envoy's retry on connect failure down the fallback list);
//   - an immediate response relayed to the client as is (503, 429);
//   - response headers sent with the served endpoint in the metadata
//     context (envoy.lb x-gateway-destination-endpoint-served), and the
//     response body as its mode asks;
//   - the stream half-closed at the response's end, cancelled when the
//     client goes away;
//   - allow_mode_override: a mode_override in the answer to the request
//     headers changes the rest of the stream's processing mode (the body
//     modes and whether the response head is sent), unless a body mode is
//     FULL_DUPLEX_STREAMED, as Envoy does;
//   - failure mode: with FailOpen a processor that cannot be reached
//     leaves the choice to the gateway (the first of Static, in turn),
//     with FailClose the client gets 500.
package pickertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Mode is an ext_proc body send mode.
type Mode = extprocfilterv3.ProcessingMode_BodySendMode

// The body modes a Gateway can run with.
const (
	None       = extprocfilterv3.ProcessingMode_NONE
	Streamed   = extprocfilterv3.ProcessingMode_STREAMED
	Buffered   = extprocfilterv3.ProcessingMode_BUFFERED
	FullDuplex = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// Config is one gateway.
type Config struct {
	// ExtProc is the processor's gRPC address; "" routes every request to
	// Static without asking (the gateway alone, for comparisons).
	ExtProc string
	// RequestBody and ResponseBody are the body modes (default NONE).
	RequestBody, ResponseBody Mode
	// SkipResponseHeaders is response_header_mode SKIP: the response
	// head is not sent to the processor (one exchange less before the
	// first byte; the served endpoint is not reported).
	SkipResponseHeaders bool
	// AllowModeOverride is the filter's allow_mode_override: the
	// processor may change the processing mode for the rest of the stream
	// in its answer to the request headers (Envoy's default is false).
	AllowModeOverride bool
	// Subset, when non-nil, is sent as the subset hint of every request.
	Subset []string
	// FailOpen routes to Static when the processor cannot be reached;
	// otherwise such a request gets 500.
	FailOpen bool
	// Static are the endpoints used without a processor (ExtProc "", or
	// FailOpen), in turn.
	Static []string
	// Retries is how many further endpoints of the list are tried after a
	// refused connection (Envoy's retry_on connect-failure; default 2).
	Retries int
	// MessageTimeout bounds each wait for the processor (default 2 s,
	// Envoy's message_timeout default is 200 ms).
	MessageTimeout time.Duration
}

// Stats counts what the gateway did.
type Stats struct {
	Requests   atomic.Uint64
	Immediate  atomic.Uint64 // answered by the processor (503, 429)
	Retried    atomic.Uint64 // a refused endpoint, the next one tried
	FailedOpen atomic.Uint64
	Failed     atomic.Uint64 // 5xx the gateway answered itself
	// Mismatch counts answers whose header and metadata disagreed.
	Mismatch atomic.Uint64
	// ResponseHeads counts response heads sent to the processor.
	ResponseHeads atomic.Uint64
}

// Gateway is the HTTP front.
type Gateway struct {
	cfg       Config
	conn      *grpc.ClientConn
	client    extprocv3.ExternalProcessorClient
	transport *http.Transport
	rr        atomic.Uint64
	Stats     Stats

	mu       sync.Mutex
	served   map[string]uint64 // endpoint -> requests it served
	failures []Failure
}

// Failure is a request the gateway could not serve.
type Failure struct {
	Start     time.Time // when the request reached the gateway
	Endpoints []string  // what it was told to try
	Err       string
}

// Failures lists the requests the gateway failed (5xx of its own, or a
// response cut), in order.
func (g *Gateway) Failures() []Failure {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Failure(nil), g.failures...)
}

type startKey struct{}

func (g *Gateway) fail(r *http.Request, eps []string, err string) {
	start, _ := r.Context().Value(startKey{}).(time.Time)
	g.Stats.Failed.Add(1)
	g.mu.Lock()
	g.failures = append(g.failures, Failure{Start: start, Endpoints: eps, Err: err})
	g.mu.Unlock()
}

// New builds a gateway; it dials the processor lazily.
func New(cfg Config) (*Gateway, error) {
	if cfg.Retries == 0 {
		cfg.Retries = 2
	}
	if cfg.MessageTimeout <= 0 {
		cfg.MessageTimeout = 2 * time.Second
	}
	g := &Gateway{cfg: cfg, served: map[string]uint64{}}
	d := &net.Dialer{Timeout: 2 * time.Second}
	d.SetMultipathTCP(false)
	g.transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       4 * time.Second, // under uvicorn's 5 s keep-alive
		DisableCompression:    true,
		ResponseHeaderTimeout: 0,
	}
	if cfg.ExtProc != "" {
		conn, err := grpc.NewClient(cfg.ExtProc, dialOptions()...)
		if err != nil {
			return nil, err
		}
		g.conn, g.client = conn, extprocv3.NewExternalProcessorClient(conn)
	}
	return g, nil
}

// Close drops the processor connection and idle upstream connections.
func (g *Gateway) Close() {
	if g.conn != nil {
		g.conn.Close()
	}
	g.transport.CloseIdleConnections()
}

// CloseIdleConnections drops the idle upstream connections, as a gateway
// does once it has read the FIN of a host that went away: a request sent
// on one the host had already closed would fail with EOF after its bytes
// went up, which the gateway may not send again.
func (g *Gateway) CloseIdleConnections() { g.transport.CloseIdleConnections() }

// Served is how many requests each endpoint served.
func (g *Gateway) Served() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.served))
	for k, v := range g.served {
		out[k] = v
	}
	return out
}

// ServeHTTP handles one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.Stats.Requests.Add(1)
	r = r.WithContext(context.WithValue(r.Context(), startKey{}, time.Now()))
	body, err := io.ReadAll(r.Body) // kept whole: a retry must be able to send it again
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if g.client == nil {
		g.forward(w, r, body, g.static(), nil)
		return
	}
	ctx, cancel := context.WithCancel(r.Context()) // the client leaving cancels the stream
	defer cancel()
	st, err := g.client.Process(ctx)
	if err != nil {
		g.failure(w, r, body, err)
		return
	}
	// One timer per stream, armed for each wait: a processor silent for
	// MessageTimeout has the stream cancelled.
	x := &exchange{g: g, st: st, timer: time.AfterFunc(time.Hour, cancel),
		reqMode: g.cfg.RequestBody, respMode: g.cfg.ResponseBody, skipHeads: g.cfg.SkipResponseHeaders}
	x.timer.Stop()
	defer x.timer.Stop()
	eps, imm, err := x.request(r, body)
	switch {
	case err != nil:
		g.failure(w, r, body, err)
		return
	case imm != nil:
		g.Stats.Immediate.Add(1)
		writeImmediate(w, imm)
		x.finish()
		return
	}
	g.forward(w, r, x.upBody, eps, x)
	x.finish()
}

func (g *Gateway) static() []string {
	if len(g.cfg.Static) == 0 {
		return nil
	}
	i := int(g.rr.Add(1)-1) % len(g.cfg.Static)
	return append(append([]string{}, g.cfg.Static[i:]...), g.cfg.Static[:i]...)
}

// failure is a processor that could not answer: the failure mode decides.
func (g *Gateway) failure(w http.ResponseWriter, r *http.Request, body []byte, err error) {
	if r.Context().Err() != nil {
		return // the client left
	}
	if g.cfg.FailOpen && len(g.cfg.Static) > 0 {
		g.Stats.FailedOpen.Add(1)
		g.forward(w, r, body, g.static(), nil)
		return
	}
	g.fail(r, nil, "ext_proc: "+err.Error())
	http.Error(w, "ext_proc: "+err.Error(), http.StatusInternalServerError)
}

// forward sends the request to the first endpoint that takes the
// connection and relays the response; x (nil without a processor) sees the
// response's headers and body.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, body []byte, eps []string, x *exchange) {
	if len(eps) == 0 {
		g.fail(r, nil, "no endpoint")
		http.Error(w, "no endpoint", http.StatusServiceUnavailable)
		return
	}
	var resp *http.Response
	var err error
	used := ""
	for i, ep := range eps {
		if i > g.cfg.Retries {
			break
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = "http", ep, r.Host, ""
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.Header.Del("Connection")
		resp, err = g.transport.RoundTrip(out)
		if err == nil {
			used = ep
			break
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			break // bytes may have gone up: never sent twice
		}
		g.Stats.Retried.Add(1)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left (a timeout, the end of a run): not a failure of ours
		}
		g.fail(r, eps, "upstream: "+err.Error())
		if r.Context().Err() == nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusServiceUnavailable)
		}
		return
	}
	defer resp.Body.Close()
	g.mu.Lock()
	g.served[used]++
	g.mu.Unlock()
	if x != nil && !x.skipHeads {
		if err := x.responseHeaders(resp, used); err != nil {
			if r.Context().Err() != nil {
				return // the client left (a timeout, the end of a run): not a failure of ours
			}
			g.fail(r, eps, "ext_proc response headers: "+err.Error())
			http.Error(w, "ext_proc: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if x != nil {
				if chunk, err = x.responseBody(chunk, false); err != nil {
					return
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) && r.Context().Err() == nil {
				g.fail(r, eps, "response cut: "+rerr.Error())
			}
			if errors.Is(rerr, io.EOF) && x != nil {
				if tail, err := x.responseBody(nil, true); err == nil && len(tail) > 0 {
					w.Write(tail)
				}
			}
			return
		}
	}
}

// exchange is one ext_proc stream.
type exchange struct {
	g      *Gateway
	st     extprocv3.ExternalProcessor_ProcessClient
	upBody []byte
	sent   bool // the first message (with the protocol configuration) went out
	timer  *time.Timer
	// The stream's processing mode: the Config's, unless the processor
	// overrode it.
	reqMode, respMode Mode
	skipHeads         bool
}

// override applies a mode_override of the answer to the request headers,
// as Envoy does with allow_mode_override: ignored when a body mode of the
// filter is FULL_DUPLEX_STREAMED or the override asks for it. (The gateway
// models no trailers and keeps every stream open until the response ends.)
func (x *exchange) override(pm *extprocfilterv3.ProcessingMode) {
	cfg := x.g.cfg
	if pm == nil || !cfg.AllowModeOverride || cfg.RequestBody == FullDuplex || cfg.ResponseBody == FullDuplex ||
		pm.GetRequestBodyMode() == FullDuplex || pm.GetResponseBodyMode() == FullDuplex {
		return
	}
	// Body modes are taken as they are; a DEFAULT header mode leaves the
	// filter's (Envoy's effective override).
	x.reqMode, x.respMode = pm.GetRequestBodyMode(), pm.GetResponseBodyMode()
	switch pm.GetResponseHeaderMode() {
	case extprocfilterv3.ProcessingMode_SKIP:
		x.skipHeads = true
	case extprocfilterv3.ProcessingMode_SEND:
		x.skipHeads = false
	}
}

func (x *exchange) send(req *extprocv3.ProcessingRequest) error {
	if !x.sent {
		x.sent = true
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: x.g.cfg.RequestBody, ResponseBodyMode: x.g.cfg.ResponseBody}
	}
	return x.st.Send(req)
}

// recv waits for the processor's next answer, at most MessageTimeout.
func (x *exchange) recv() (*extprocv3.ProcessingResponse, error) {
	x.timer.Reset(x.g.cfg.MessageTimeout)
	r, err := x.st.Recv()
	if !x.timer.Stop() && err != nil {
		return nil, fmt.Errorf("message timeout (%v): %w", x.g.cfg.MessageTimeout, err)
	}
	return r, err
}

// request runs the request phases: the endpoints to try, or the
// processor's immediate response.
func (x *exchange) request(r *http.Request, body []byte) ([]string, *extprocv3.ImmediateResponse, error) {
	hm := &corev3.HeaderMap{}
	add := func(k, v string) {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	add(":method", r.Method)
	add(":path", r.URL.RequestURI())
	add(":authority", r.Host)
	add(":scheme", "http")
	for k, vs := range r.Header {
		for _, v := range vs {
			add(strings.ToLower(k), v)
		}
	}
	if len(body) > 0 && r.Header.Get("Content-Length") == "" {
		add("content-length", strconv.Itoa(len(body)))
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hm, EndOfStream: len(body) == 0,
	}}}
	if x.g.cfg.Subset != nil {
		vals := make([]*structpb.Value, len(x.g.cfg.Subset))
		for i, ep := range x.g.cfg.Subset {
			vals[i] = structpb.NewStringValue(ep)
		}
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint-subset": structpb.NewListValue(&structpb.ListValue{Values: vals}),
			}},
		}}
	}
	if err := x.send(req); err != nil {
		return nil, nil, err
	}
	mode := x.reqMode
	if len(body) == 0 {
		mode = None
	}
	x.upBody = body
	var eps []string
	var err error
	if mode == FullDuplex {
		// Send the body without waiting; the headers answer and the
		// streamed body come back in order.
		for off := 0; off < len(body); off += 16 << 10 {
			end := min(off+16<<10, len(body))
			if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
				Body: body[off:end], EndOfStream: end == len(body),
			}}}); err != nil {
				return nil, nil, err
			}
		}
	}
	resp, err := x.recv()
	if err != nil {
		return nil, nil, err
	}
	if imm := resp.GetImmediateResponse(); imm != nil {
		return nil, imm, nil
	}
	hr := resp.GetRequestHeaders()
	if hr == nil {
		return nil, nil, fmt.Errorf("answer to request headers is %T", resp.GetResponse())
	}
	if eps, err = x.g.endpoints(hr, resp.GetDynamicMetadata()); err != nil {
		return nil, nil, err
	}
	if mode != FullDuplex { // a full-duplex body is on its way already
		x.override(resp.GetModeOverride())
		if mode = x.reqMode; len(body) == 0 {
			mode = None
		}
	}
	switch mode {
	case Buffered:
		if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
			return nil, nil, err
		}
		if _, err := x.expectBody(true); err != nil {
			return nil, nil, err
		}
	case Streamed:
		for off := 0; off < len(body); off += 16 << 10 {
			end := min(off+16<<10, len(body))
			if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}}); err != nil {
				return nil, nil, err
			}
			if _, err := x.expectBody(true); err != nil {
				return nil, nil, err
			}
		}
	case FullDuplex:
		var up []byte
		for {
			sr, err := x.expectBody(true)
			if err != nil {
				return nil, nil, err
			}
			if sr == nil {
				return nil, nil, errors.New("FULL_DUPLEX_STREAMED: a body answer without a streamed response")
			}
			up = append(up, sr.GetBody()...)
			if sr.GetEndOfStream() {
				break
			}
		}
		x.upBody = up
	}
	return eps, nil, nil
}

// endpoints reads the pick from the headers answer, and checks that the
// header and the metadata agree.
func (g *Gateway) endpoints(hr *extprocv3.HeadersResponse, md *structpb.Struct) ([]string, error) {
	var header string
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), "x-gateway-destination-endpoint") {
			header = string(h.GetHeader().GetRawValue())
			if header == "" {
				header = h.GetHeader().GetValue()
			}
		}
	}
	meta := md.GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	if header != meta {
		g.Stats.Mismatch.Add(1)
		return nil, fmt.Errorf("header %q and metadata %q disagree", header, meta)
	}
	if meta == "" {
		return nil, errors.New("no endpoint in the answer")
	}
	var eps []string
	for _, ep := range strings.Split(meta, ",") {
		eps = append(eps, strings.TrimSpace(ep))
	}
	return eps, nil
}

// expectBody reads a body answer; the streamed response in it, if any.
func (x *exchange) expectBody(request bool) (*extprocv3.StreamedBodyResponse, error) {
	resp, err := x.recv()
	if err != nil {
		return nil, err
	}
	var br *extprocv3.BodyResponse
	if request {
		br = resp.GetRequestBody()
	} else {
		br = resp.GetResponseBody()
	}
	if br == nil {
		return nil, fmt.Errorf("answer to a body is %T", resp.GetResponse())
	}
	return br.GetResponse().GetBodyMutation().GetStreamedResponse(), nil
}

// responseHeaders sends the response head with the served endpoint.
func (x *exchange) responseHeaders(resp *http.Response, served string) error {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(strconv.Itoa(resp.StatusCode))}}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	req := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-served": structpb.NewStringValue(served)}},
		}},
	}
	x.g.Stats.ResponseHeads.Add(1)
	if err := x.send(req); err != nil {
		return err
	}
	ans, err := x.recv()
	if err != nil {
		return err
	}
	if ans.GetResponseHeaders() == nil {
		return fmt.Errorf("answer to response headers is %T", ans.GetResponse())
	}
	return nil
}

// responseBody passes one chunk of the response through the processor as
// the mode asks and returns what goes to the client.
func (x *exchange) responseBody(chunk []byte, eos bool) ([]byte, error) {
	mode := x.respMode
	if mode == None {
		return chunk, nil
	}
	if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}}}); err != nil {
		return nil, err
	}
	sr, err := x.expectBody(false)
	if err != nil {
		return nil, err
	}
	if mode == FullDuplex {
		if sr == nil {
			return nil, errors.New("FULL_DUPLEX_STREAMED: a body answer without a streamed response")
		}
		return sr.GetBody(), nil
	}
	return chunk, nil
}

// finish half-closes the stream and waits for the processor to end it.
func (x *exchange) finish() {
	_ = x.st.CloseSend()
	x.timer.Reset(x.g.cfg.MessageTimeout)
	for {
		if _, err := x.st.Recv(); err != nil {
			return
		}
	}
}

func writeImmediate(w http.ResponseWriter, imm *extprocv3.ImmediateResponse) {
	for _, h := range imm.GetHeaders().GetSetHeaders() {
		v := string(h.GetHeader().GetRawValue())
		if v == "" {
			v = h.GetHeader().GetValue()
		}
		w.Header().Set(h.GetHeader().GetKey(), v)
	}
	code := int(imm.GetStatus().GetCode())
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	w.Write(imm.GetBody())
}
