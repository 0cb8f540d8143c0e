package picker

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The answer to the request headers turns the response head off (and
// response trailers on, so that the data plane keeps the stream open for
// the request's life) only when the served endpoint cannot differ from the
// pick and the filter can take an override: body modes known from
// protocol_config and neither FULL_DUPLEX_STREAMED.
func TestPickAnswerModeOverride(t *testing.T) {
	r := testRegistry(t, Config{})
	up := HostLoad{Serving: true, Replicas: 2, Ready: 2}
	r.setLoadForTest(0, up)
	r.setLoadForTest(1, up)
	x := NewExtProc(r, Namespaces{}, r.log)
	headers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-session-id", RawValue: []byte("s")}}},
	}}}
	answer := func(st streamState) *extprocfilterv3.ProcessingMode {
		t.Helper()
		resp, end := x.handle(&st, headers)
		if end || resp.GetRequestHeaders() == nil {
			t.Fatalf("no pick: %v", resp)
		}
		x.reg.Done(st.pick)
		return resp.GetModeOverride()
	}
	buffered := streamState{modesKnown: true, reqMode: extprocfilterv3.ProcessingMode_BUFFERED, respMode: extprocfilterv3.ProcessingMode_STREAMED}
	pm := answer(buffered)
	if pm.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP || pm.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND ||
		pm.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_BUFFERED || pm.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_STREAMED ||
		pm.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_DEFAULT || pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_DEFAULT {
		t.Errorf("override %v: want response head SKIP, response trailers SEND, the filter's body modes, the rest DEFAULT", pm)
	}
	if pm := answer(streamState{}); pm != nil {
		t.Errorf("body modes unknown (no protocol_config): override %v", pm)
	}
	if pm := answer(streamState{modesKnown: true, reqFullDuplex: true, reqMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED}); pm != nil {
		t.Errorf("FULL_DUPLEX_STREAMED: override %v", pm)
	}
	for i := range 2 { // both hosts in doubt: a fallback may serve
		r.mu.RLock()
		hs := r.hosts[i]
		r.mu.RUnlock()
		hs.mu.Lock()
		hs.failures = 1
		hs.mu.Unlock()
	}
	if pm := answer(buffered); pm != nil {
		t.Errorf("the picked host in doubt: override %v, want none (the served endpoint reported)", pm)
	}
}
