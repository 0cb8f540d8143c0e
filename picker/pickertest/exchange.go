package pickertest

import (
	"context"
	"errors"
	"io"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Client makes bare ext_proc exchanges, without HTTP (benchmarks).
type Client struct {
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
}

// Dial connects to an ext_proc server.
func Dial(addr string) (*Client, error) {
	conn, err := grpc.NewClient(addr, dialOptions()...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, client: extprocv3.NewExternalProcessorClient(conn)}, nil
}

// dialOptions are a data plane's: fixed windows (no bandwidth probing, as
// Envoy's gRPC client does not probe).
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(8 << 20)}
}

// Close drops the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Exchange runs one request's exchange: request headers (a POST of the
// session) and the pick, then response headers with served as the served
// endpoint, then the end of the stream. It returns how long the pick and
// the response headers' answer took.
func (c *Client) Exchange(session, served string) (pick, head time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	st, err := c.client.Process(ctx)
	if err != nil {
		return 0, 0, err
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	if err := st.Send(&extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":method", "POST"), hv(":path", "/v1/messages"), hv(":authority", "gw"), hv(":scheme", "http"),
			hv("content-type", "application/json"), hv("content-length", "2000"), hv("x-session-id", session),
		}}}},
	}); err != nil {
		return 0, 0, err
	}
	r, err := st.Recv()
	if err != nil {
		return 0, 0, err
	}
	if r.GetRequestHeaders() == nil {
		return 0, 0, errors.New("no pick")
	}
	pick = time.Since(t0)
	t1 := time.Now()
	if err := st.Send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200")}}}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-served": structpb.NewStringValue(served)}},
		}},
	}); err != nil {
		return 0, 0, err
	}
	if _, err := st.Recv(); err != nil {
		return 0, 0, err
	}
	head = time.Since(t1)
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return 0, 0, errors.New("the stream did not end after the half-close")
	}
	return pick, head, nil
}
