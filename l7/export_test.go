package l7

import (
	"net/http"
	"testing"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// Exports for package l7_test: the kernel datapaths live in package
// kernel, which imports l7, so their tests through the shim
// (kernel_*_test.go) are an external test package and reach the shim
// suite's helpers through these.
var (
	MustSim           = mustSim
	ModelConfig       = modelConfig
	MustModel         = mustModel
	MustShim          = mustShim
	WaitInFlight      = waitInFlight
	MessagesRequest   = messagesRequest
	MessagesRequestN  = messagesRequestN
	LongStreamRequest = longStreamRequest
	RequestsDone      = requestsDone
	RawUpstream       = rawUpstream
)

// Client is a raw client connection of the tests (mustDial).
type Client = client

// MustDial dials addr as a test client.
func MustDial(tb testing.TB, addr string) *Client { return mustDial(tb, addr) }

// Send writes raw bytes.
func (c *client) Send(tb testing.TB, s string) { c.send(tb, s) }

// Response reads one response and its whole body.
func (c *client) Response(tb testing.TB) (*http.Response, string) { return c.response(tb) }

// ReadResponse reads a response head, leaving the body to the caller.
func (c *client) ReadResponse() (*http.Response, error) { return readResponse(c) }

// PoolIdle is the number of idle pooled connections of s to addr.
func PoolIdle(s *Shim, addr string) int { return s.pool.Idle(addr) }

// SetTestDefaults makes every shim built with a nil Datapath use dp, and
// every pool such a shim makes dial with dial (the suite over a kernel
// datapath).
func SetTestDefaults(dp func() datapath.Datapath, dial DialFunc) {
	defaultDatapath, defaultDial = dp, dial
}
