package picker

import (
	"encoding/json"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The names of the Gateway API Inference Extension's endpoint picker
// protocol (docs/multihost.md describes each exchange).
const (
	// DestinationKey names the picked endpoints: a request header the
	// picker sets, and the key of the same value in the dynamic metadata
	// of its answer, under DestinationNamespace. The value is "ip:port",
	// or several separated by commas: the first is the pick, the rest are
	// the fallbacks a gateway that retries tries in order.
	DestinationKey = "x-gateway-destination-endpoint"
	// DestinationNamespace is the default metadata namespace of the pick
	// and of the served endpoint.
	DestinationNamespace = "envoy.lb"
	// ServedKey is the endpoint that actually served the request, which
	// the gateway reports in the metadata context of the response's
	// messages, under DestinationNamespace.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey carry, in a request's metadata
	// context, the endpoints the gateway allows for it (a list, or one
	// string of comma-separated endpoints).
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
)

// Namespaces are the metadata namespaces the picker reads and writes (the
// protocol's defaults unless a gateway is configured otherwise).
type Namespaces struct {
	Destination string // the pick and the served endpoint (envoy.lb)
	Subset      string // the subset hint (envoy.lb.subset_hint)
}

func (n *Namespaces) setDefaults() {
	if n.Destination == "" {
		n.Destination = DestinationNamespace
	}
	if n.Subset == "" {
		n.Subset = SubsetNamespace
	}
}

// headerValue reads an Envoy header value: raw_value where the data plane
// sends bytes (Envoy does), else value.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// requestFacts are the parts of a request head placement uses.
type requestFacts struct {
	session     string
	promptBytes int64
}

// readHeaders takes the session id (the first of the configured headers
// present, names compared without case: Envoy sends them lower-cased) and
// the Content-Length.
func readHeaders(hm *corev3.HeaderMap, sessionHeaders []string) requestFacts {
	var f requestFacts
	rank := len(sessionHeaders)
	for _, h := range hm.GetHeaders() {
		k := h.GetKey()
		if strings.EqualFold(k, "content-length") {
			if n, err := strconv.ParseInt(strings.TrimSpace(headerValue(h)), 10, 64); err == nil && n > 0 {
				f.promptBytes = n
			}
			continue
		}
		for j := 0; j < rank; j++ {
			if strings.EqualFold(k, sessionHeaders[j]) {
				if v := strings.TrimSpace(headerValue(h)); v != "" {
					f.session, rank = v, j
				}
				break
			}
		}
	}
	return f
}

// metadataField finds key in namespace ns of a metadata context.
func metadataField(md *corev3.Metadata, ns, key string) *structpb.Value {
	return md.GetFilterMetadata()[ns].GetFields()[key]
}

// endpointList reads a metadata value that holds endpoints: a string of
// comma-separated ip:port, or a list of such strings.
func endpointList(v *structpb.Value) []string {
	var out []string
	add := func(s string) {
		for _, ep := range strings.Split(s, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				out = append(out, ep)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	}
	return out
}

// subset reads the subset hint: the endpoints, and whether the key was
// there at all (present and empty means no endpoint is allowed).
func subset(md *corev3.Metadata, ns string) ([]string, bool) {
	v := metadataField(md, ns, SubsetKey)
	if v == nil {
		return nil, false
	}
	return endpointList(v), true
}

// served reads the endpoint the gateway reports it sent the request to.
func served(md *corev3.Metadata, ns string) string {
	if eps := endpointList(metadataField(md, ns, ServedKey)); len(eps) > 0 {
		return eps[0]
	}
	return ""
}

// pickResponse answers a request's headers with the pick: the same value
// in the header (replacing any the client sent: a client never chooses
// the host) and in the dynamic metadata. The two parts are built once per
// endpoint list (answers.go) and shared: a marshalled message is only
// read.
func pickResponse(parts *pickParts) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				// The route may depend on the header just set (an original
				// destination cluster reading it): let the data plane
				// look again.
				ClearRouteCache: true,
				HeaderMutation:  parts.mutation,
			},
		}},
		DynamicMetadata: parts.metadata,
	}
}

// pickParts are the parts of the answer that depend on the endpoint list
// only.
type pickParts struct {
	mutation *extprocv3.HeaderMutation
	metadata *structpb.Struct
}

func newPickParts(endpoints []string, ns string) *pickParts {
	v := strings.Join(endpoints, ",")
	return &pickParts{
		mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: DestinationKey, RawValue: []byte(v)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}}},
		metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			ns: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				DestinationKey: structpb.NewStringValue(v),
			}}),
		}},
	}
}

// skipResponseHeaders is the mode override of a request whose served
// endpoint cannot differ from the pick: the response head is not sent to
// the picker (the data plane forwards it at once). The body modes stay
// the filter's (an override's body modes are always taken as they are);
// DEFAULT leaves a header or trailer mode as the filter has it. Response
// trailers are asked for so that the data plane keeps the stream open
// until the response ends (Envoy closes it as soon as it expects nothing
// more): the request counts in flight on its host for its whole life,
// and leaves the count at the stream's end. A response without trailers
// sends nothing more; one with trailers gets an empty answer after its
// last byte, never before its first.
func skipResponseHeaders(reqBody, respBody extprocfilterv3.ProcessingMode_BodySendMode) *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:     reqBody,
		ResponseBodyMode:    respBody,
	}
}

// immediate answers the request itself (503 no host ready, 429 shed), with
// a JSON error body and Retry-After.
func immediate(code int, kind, msg string, retryAfter int) *extprocv3.ProcessingResponse {
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}})
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(strconv.Itoa(retryAfter))}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			}},
			Body:    body,
			Details: "lmwarden_picker_" + kind,
		},
	}}
}

// Continue answers to the other phases: nothing changed.
var (
	continueResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}
	continueRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// bodyAnswer answers one body chunk. In FULL_DUPLEX_STREAMED mode the data
// plane forwards only what the processor sends back, so the chunk is
// returned unchanged as a streamed response; in the other modes an empty
// common response lets the data plane's own copy through.
func bodyAnswer(request, fullDuplex bool, chunk *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	cr := &extprocv3.CommonResponse{}
	if fullDuplex {
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk.GetBody(), EndOfStream: chunk.GetEndOfStream()},
		}}
	}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
}
