package picker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ExtProc is the endpoint picker as an Envoy external processor: the
// gateway opens one gRPC stream per HTTP request and sends the request's
// phases on it (headers, then the body and trailers if its processing
// mode asks for them, then the response's); every message not in
// observability mode gets exactly one answer, in order.
//
// The pick needs the request head only (the session header and
// Content-Length), so it is made on the request headers and answered at
// once whatever the body mode: the data plane can connect to the host
// while the body still arrives. Body chunks are answered as the mode
// requires (FULL_DUPLEX_STREAMED: sent back unchanged, since the data
// plane forwards what the processor returns; the other modes: an empty
// answer that lets the data plane's copy through). The response headers
// carry the endpoint that served (x-gateway-destination-endpoint-served);
// the request counts in flight on its host until its response ends or the
// stream does (end of stream, a reset, a cancelled client).
type ExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	reg     *Registry
	ns      Namespaces
	log     *slog.Logger
	answers *answerCache
	// RetryAfter is the Retry-After of the 503 and 429 answers, seconds.
	RetryAfter int
}

// DefaultRetryAfter is the Retry-After, in seconds, of the picker's 503
// and 429 answers: about the time a host takes to be seen again.
const DefaultRetryAfter = 1

// NewExtProc serves picks from reg.
func NewExtProc(reg *Registry, ns Namespaces, log *slog.Logger) *ExtProc {
	ns.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	return &ExtProc{reg: reg, ns: ns, log: log, answers: newAnswerCache(ns.Destination), RetryAfter: DefaultRetryAfter}
}

// streamState is what one stream (one HTTP request) carries across its
// messages.
type streamState struct {
	// The body modes of the gateway's filter, when its first message said
	// them (protocol_config).
	modesKnown                    bool
	reqMode, respMode             extprocfilterv3.ProcessingMode_BodySendMode
	reqFullDuplex, respFullDuplex bool
	observe                       bool // observability mode: never answer
	pick                          *Pick
}

// canOverride says the answer to the request headers may change the
// stream's processing mode: the filter's body modes are known (to be kept
// as they are) and neither is FULL_DUPLEX_STREAMED, with which Envoy
// supports no mode override.
func (st *streamState) canOverride() bool {
	return st.modesKnown && !st.reqFullDuplex && !st.respFullDuplex
}

// Process serves one stream.
func (x *ExtProc) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	x.reg.stats.streams.Add(1)
	var st streamState
	defer func() { x.reg.Done(st.pick) }()
	first := true
	for {
		req, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || srv.Context().Err() != nil {
				return nil
			}
			return status.Errorf(codes.Unknown, "receiving from the data plane: %v", err)
		}
		if first {
			first = false
			if pc := req.GetProtocolConfig(); pc != nil {
				st.modesKnown = true
				st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
				st.reqFullDuplex = pc.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
				st.respFullDuplex = pc.GetResponseBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
			}
		}
		st.observe = req.GetObservabilityMode()
		resp, end := x.handle(&st, req)
		if resp != nil && !st.observe {
			if err := srv.Send(resp); err != nil {
				return status.Errorf(codes.Unavailable, "sending to the data plane: %v", err)
			}
		}
		if end {
			return nil
		}
	}
}

// handle answers one message; end says the stream has nothing more to do
// (an immediate response was sent).
func (x *ExtProc) handle(st *streamState, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, bool) {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if st.pick != nil { // a new request on the same stream: the last one ended
			x.reg.Done(st.pick)
			st.pick = nil
		}
		facts := readHeaders(v.RequestHeaders.GetHeaders(), x.reg.cfg.SessionHeaders)
		sub, hasSub := subset(req.GetMetadataContext(), x.ns.Subset)
		now := time.Now()
		p, err := x.reg.Pick(Request{SessionID: facts.session, PromptBytes: facts.promptBytes, Subset: sub, HasSubset: hasSub, Now: now})
		switch {
		case errors.Is(err, ErrShed):
			return immediate(429, "shed", err.Error(), x.RetryAfter), true
		case err != nil:
			x.log.Debug("no endpoint", "err", err)
			return immediate(503, "no_host_ready", err.Error(), x.RetryAfter), true
		}
		st.pick = p
		if x.log.Enabled(context.Background(), slog.LevelDebug) { // no arguments built per pick otherwise
			x.log.Debug("picked", "endpoints", p.Endpoints, "kind", p.Kind.String())
		}
		resp := pickResponse(x.answers.get(p.Endpoints))
		if !p.ReportServed && st.canOverride() {
			resp.ModeOverride = skipResponseHeaders(st.reqMode, st.respMode)
		}
		return resp, false
	case *extprocv3.ProcessingRequest_RequestBody:
		return bodyAnswer(true, st.reqFullDuplex, v.RequestBody), false
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return continueRequestTrailers, false
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if st.pick != nil {
			x.reg.Served(st.pick, served(req.GetMetadataContext(), x.ns.Destination))
			if v.ResponseHeaders.GetEndOfStream() {
				x.reg.Done(st.pick)
			}
		}
		return continueResponseHeaders, false
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.pick != nil && v.ResponseBody.GetEndOfStream() {
			x.reg.Done(st.pick)
		}
		return bodyAnswer(false, st.respFullDuplex, v.ResponseBody), false
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.pick != nil {
			x.reg.Done(st.pick)
		}
		return continueResponseTrailers, false
	}
	// A message with no phase (a flow-control update): nothing to answer.
	return nil, false
}
