package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// Defaults of the configuration (docs/config.md lists them for users).
const (
	DefaultAdmin = "127.0.0.1:9100"
	// DefaultSpillThreshold is the floor of spill_threshold auto (the
	// default) and its value while a replica's batch is not yet known.
	DefaultSpillThreshold  = 8
	DefaultSessionTTL      = 30 * time.Minute
	DefaultPolicy          = PolicySticky
	DefaultPollInterval    = 250 * time.Millisecond
	DefaultPollTimeout     = 2 * time.Second
	DefaultUnhealthyAfter  = 3
	DefaultHitRateWindow   = 30 * time.Second
	DefaultDatapath        = "auto"
	DefaultModelName       = "default"
	DefaultVLLMLBStatsMode = "fresh"
	// DefaultBodyTimeout: a request body must have arrived whole this long
	// after its head (else 408; docs/serve.md).
	DefaultBodyTimeout = 60 * time.Second
	// DefaultMaxConnectionsPerClient bounds one client address's
	// connections to the frontends.
	DefaultMaxConnectionsPerClient = 1024
	// DefaultMaxSessions bounds a model's session table.
	DefaultMaxSessions = 100000
)

// DefaultSessionHeaders are the request headers that carry a session id, in
// the order they are tried: Claude Code's, then the generic one.
var DefaultSessionHeaders = []string{"X-Claude-Code-Session-Id", "X-Session-Id"}

// DefaultAgentHeaders are the request headers that name an agent within a
// session (a Claude Code subagent), in the order they are tried: the
// session and the agent together are one conversation.
var DefaultAgentHeaders = []string{"X-Claude-Code-Agent-Id"}

// Config is the whole daemon configuration (lmwarden.yaml).
type Config struct {
	// Listen is the frontend of models that name none (and what --listen
	// overrides when there is one model).
	Listen string `yaml:"listen"`
	// Admin is the admin HTTP address (API, /metrics, dashboard); "" disables it.
	Admin string `yaml:"admin"`
	// Datapath is auto, kernel (msg, else skb), msg, skb or user.
	Datapath string `yaml:"datapath"`
	// PollInterval is how often every replica's /metrics (and /health) is read.
	PollInterval time.Duration `yaml:"poll_interval"`
	// PollTimeout bounds one scrape.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// UnhealthyAfter failed polls in a row make a replica unhealthy; one good
	// poll makes it healthy again.
	UnhealthyAfter int `yaml:"unhealthy_after"`
	// HitRateWindow is the window of the prefix-cache hit rate.
	HitRateWindow time.Duration `yaml:"hit_rate_window"`
	// HashKey is the 16-byte key of the session-id hash. nil: random per
	// process (session hashes then change across restarts).
	HashKey HashKey `yaml:"hash_key"`
	// HashKeyFile names a file holding the key instead (32 hex digits,
	// surrounding space allowed): a mounted secret, shared with other
	// wardens and the endpoint picker (docs/multihost.md).
	HashKeyFile string `yaml:"hash_key_file"`
	// AccessLog: one info line a request (l7/accesslog.go, docs/serve.md,
	// "Access log"); nil means on. serve --access-log overrides it.
	AccessLog *bool `yaml:"access_log"`
	// BodyTimeout bounds the whole request body: it must have arrived this
	// long after its head, or the client gets 408 and the replica's
	// request is aborted.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MaxConnections bounds the client connections of all frontends
	// together; 0: derived from the descriptor limit at start (a quarter
	// of what is left after a reserve, at most 65536: a busy connection
	// holds up to four descriptors, its own, a replica connection and a
	// splice pipe). serve lowers a larger one to that.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerClient bounds the connections of one client
	// address. At either bound the oldest idle connection is closed to
	// make room (at the total bound, else a heavier client's request
	// still waiting for its body); otherwise the new one is refused (503).
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	// AdminTokenFile holds the bearer token every admin write must carry
	// (docs/admin.md); "": DefaultAdminTokenFile(). The warden makes it
	// (mode 0600) when it is missing.
	AdminTokenFile string `yaml:"admin_token_file"`
	// AdminHosts are the host names the admin API answers to besides IP
	// addresses and localhost (a Host header naming anything else is
	// refused: DNS rebinding).
	AdminHosts []string      `yaml:"admin_hosts"`
	Models     []ModelConfig `yaml:"models"`

	hashKeyFromFile bool // HashKey was read from HashKeyFile (validation runs again)
}

// HashKey is the session-hash key; in the file, 32 hex digits.
type HashKey []byte

// UnmarshalYAML reads 32 hex digits.
func (k *HashKey) UnmarshalYAML(n *yaml.Node) error {
	b, err := hex.DecodeString(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || len(b) != 16 {
		return errors.New("want 32 hex digits (16 bytes)")
	}
	*k = b
	return nil
}

// ModelConfig is one served model: its frontend, its replicas in one of the
// two deployment shapes, and its placement settings.
type ModelConfig struct {
	Name     string `yaml:"name"`
	Frontend string `yaml:"frontend"`
	// Shape 1: one URL per replica.
	Replicas []string `yaml:"replicas"`
	// Shape 2: one URL and a rank count; the shim writes X-data-parallel-rank.
	Endpoint string `yaml:"endpoint"`
	Ranks    int    `yaml:"ranks"`

	Affinity       bool           `yaml:"affinity"`
	SpillThreshold SpillThreshold `yaml:"spill_threshold"`
	SessionHeaders []string       `yaml:"session_headers"`
	// AgentHeaders name the agent within a session: a request that
	// carries one is a conversation of its own (a subagent's), keyed by
	// the session and the agent. An empty list keys on the session alone.
	AgentHeaders []string `yaml:"agent_headers"`
	// BodyKey: a request without a session header is keyed by its body's
	// stable start (the first system block and first user message, from
	// the bytes that came with its head), hashed like a session id.
	BodyKey    bool          `yaml:"body_key"`
	SessionTTL time.Duration `yaml:"session_ttl"`
	Policy     Policy        `yaml:"policy"`
	// VLLMLBStats is the stats mode of the vllm-lb emulation: fresh, stale, none.
	VLLMLBStats string `yaml:"vllm_lb_stats"`
	// Admission is policy cost's cache-capacity admission (agent/placement/admission.go).
	Admission AdmissionConfig `yaml:"admission"`
	// PinSources are the client addresses (an IP, or a CIDR prefix) whose
	// X-data-parallel-rank and X-Warden-Replica headers are honoured;
	// from anyone else they are ignored (counted) and placement decides.
	PinSources []string `yaml:"pin_sources"`
	// MaxSessions bounds the session table; beyond it the session worth
	// least goes, weighed by the tokens of its latest served turn and by
	// how long ago (agent/placement/evict.go).
	MaxSessions int `yaml:"max_sessions"`
	// FrontendTakeover lets the kernel datapath serve the frontend even
	// when a process other than the model's replicas listens on its port
	// (that process then gets no new connections). Without it serve
	// refuses such a frontend at start, naming the process.
	FrontendTakeover bool `yaml:"frontend_takeover"`
}

// OneEndpoint reports whether the model uses deployment shape 2.
func (mc *ModelConfig) OneEndpoint() bool { return mc.Endpoint != "" }

// ReplicaCount is the number of replicas (or ranks).
func (mc *ModelConfig) ReplicaCount() int {
	if mc.OneEndpoint() {
		return mc.Ranks
	}
	return len(mc.Replicas)
}

// SpillThreshold is a fixed number of in-flight requests, or Auto (derived
// from what the replica can batch; see placement.go). Prefill (with Auto,
// the default, `prefill`) adds policy sticky's spill on the prefill queued
// ahead on the conversation's replica
// (agent/placement/policy_sticky_prefill.go); `auto` is the count alone.
type SpillThreshold struct {
	Auto    bool
	Prefill bool
	N       int
}

func (s SpillThreshold) String() string {
	switch {
	case s.Prefill:
		return "prefill"
	case s.Auto:
		return "auto"
	}
	return strconv.Itoa(s.N)
}

// ParseSpillThreshold reads a spill threshold: a number, auto or prefill.
func ParseSpillThreshold(v string) (SpillThreshold, error) {
	switch v {
	case "auto":
		return SpillThreshold{Auto: true}, nil
	case "prefill":
		return SpillThreshold{Auto: true, Prefill: true}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return SpillThreshold{}, fmt.Errorf("want a number, auto or prefill, got %q", v)
	}
	return SpillThreshold{N: n}, nil
}

// UnmarshalYAML accepts an integer or the words auto and prefill.
func (s *SpillThreshold) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a number, auto or prefill, got a " + map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[n.Kind])
	}
	v, err := ParseSpillThreshold(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// DefaultConfig is the configuration of `lmwarden serve` without a file: one
// model named "default" whose replicas and frontend come from flags.
func DefaultConfig() *Config {
	c := &Config{}
	c.ApplyDefaults()
	c.Models = []ModelConfig{DefaultModel(DefaultModelName)}
	return c
}

// DefaultModel is a model named name with every default set and nothing
// else (no frontend, no replicas).
func DefaultModel(name string) ModelConfig {
	var mc ModelConfig
	mc.setDefaults()
	mc.Name = name
	return mc
}

// setDefaults sets every field that has a default: the one place a
// model's defaults are written (a model in the file starts from them).
func (mc *ModelConfig) setDefaults() {
	*mc = ModelConfig{
		Affinity:       true,
		SpillThreshold: SpillThreshold{Auto: true, Prefill: true},
		SessionHeaders: append([]string(nil), DefaultSessionHeaders...),
		AgentHeaders:   append([]string(nil), DefaultAgentHeaders...),
		BodyKey:        true,
		SessionTTL:     DefaultSessionTTL,
		Policy:         DefaultPolicy,
		VLLMLBStats:    DefaultVLLMLBStatsMode,
		Admission:      DefaultAdmission,
		MaxSessions:    DefaultMaxSessions,
	}
}

// ApplyDefaults sets the daemon-wide fields left at zero to their
// defaults (the models are left as they are).
func (c *Config) ApplyDefaults() {
	if c.Admin == "" {
		c.Admin = DefaultAdmin
	}
	if c.Datapath == "" {
		c.Datapath = DefaultDatapath
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PollTimeout == 0 {
		c.PollTimeout = DefaultPollTimeout
	}
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = DefaultUnhealthyAfter
	}
	if c.HitRateWindow == 0 {
		c.HitRateWindow = DefaultHitRateWindow
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.MaxConnectionsPerClient == 0 {
		c.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient
	}
}

// LoadConfig reads, decodes and validates a file. Its error is a
// *ConfigError listing every problem in the file, each with its field and
// line.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// ParseConfig decodes and validates YAML text: fields the text leaves out
// keep their defaults, unknown fields are errors, and the error (a
// *ConfigError) lists every problem, not only the first.
func ParseConfig(data []byte) (*Config, error) {
	c := &Config{}
	c.ApplyDefaults()
	p, syntax := decodeYAML(data, c)
	if syntax {
		return nil, p.err("")
	}
	if c.Admin == "off" {
		c.Admin = "" // `admin: off` or `admin: ""`: no admin server
	}
	decoded := len(p.list)
	c.validate(p)
	// a field that failed to decode kept its default: what validation says
	// about it (or about what depends on it) would only confuse
	kept := p.list[:decoded]
	for _, f := range p.list[decoded:] {
		if !(&problems{list: p.list[:decoded]}).has(f.Path) {
			kept = append(kept, f)
		}
	}
	p.list = kept
	if err := p.err(""); err != nil {
		return nil, err
	}
	return c, nil
}

// AccessLogOn reports whether the access log is on (the default).
func (c *Config) AccessLogOn() bool { return c.AccessLog == nil || *c.AccessLog }

// ApplyFlags lets command-line flags override the file: listen and replicas
// apply to the only model (an error when there are several), admin and
// datapath to the daemon. Empty values change nothing. It validates again.
func (c *Config) ApplyFlags(listen, admin, datapath string, replicas []string) error {
	if listen != "" || len(replicas) > 0 {
		if len(c.Models) != 1 {
			return fmt.Errorf("%w: --listen and --replica need exactly one model in the config, have %d", ErrInvalidConfig, len(c.Models))
		}
		if listen != "" {
			c.Listen = listen
			c.Models[0].Frontend = listen
		}
		if len(replicas) > 0 {
			c.Models[0].Replicas = append([]string(nil), replicas...)
			c.Models[0].Endpoint, c.Models[0].Ranks = "", 0
		}
	}
	if admin != "" {
		c.Admin = admin
	}
	if datapath != "" {
		c.Datapath = datapath
	}
	return c.Validate()
}

// Validate checks every field and returns a *ConfigError naming each bad
// one, e.g. `models[1].replicas[0]: ...`. Models without a frontend take
// Listen.
func (c *Config) Validate() error {
	var p problems
	c.validate(&p)
	return p.err("")
}

func (c *Config) validate(p *problems) {
	bad := p.add
	if c.Admin != "" {
		if err := checkHostPort(c.Admin); err != nil {
			bad("admin", "%v", err)
		}
	}
	switch c.Datapath {
	case "auto", "kernel", "msg", "skb", "user":
	default:
		bad("datapath", "%q: want auto, kernel, msg, skb or user", c.Datapath)
	}
	if c.PollInterval <= 0 {
		bad("poll_interval", "must be positive, got %v", c.PollInterval)
	}
	if c.PollTimeout <= 0 {
		bad("poll_timeout", "must be positive, got %v", c.PollTimeout)
	}
	if c.UnhealthyAfter < 1 {
		bad("unhealthy_after", "must be at least 1, got %d", c.UnhealthyAfter)
	}
	if c.HitRateWindow < c.PollInterval {
		bad("hit_rate_window", "%v is shorter than poll_interval %v", c.HitRateWindow, c.PollInterval)
	}
	if c.HashKey != nil && len(c.HashKey) != 16 {
		bad("hash_key", "want 16 bytes, got %d", len(c.HashKey))
	}
	if c.HashKeyFile != "" {
		switch b, err := os.ReadFile(c.HashKeyFile); {
		case c.HashKey != nil && !c.hashKeyFromFile:
			bad("hash_key_file", "set hash_key or hash_key_file, not both")
		case err != nil:
			bad("hash_key_file", "%v", err)
		default:
			k, err := hex.DecodeString(strings.TrimSpace(string(b)))
			if err != nil || len(k) != 16 {
				bad("hash_key_file", "%s: want 32 hex digits (16 bytes)", c.HashKeyFile)
			} else {
				c.HashKey, c.hashKeyFromFile = k, true
			}
		}
	}
	if c.Listen != "" {
		if err := checkHostPort(c.Listen); err != nil {
			bad("listen", "%v", err)
		}
	}
	if c.BodyTimeout <= 0 {
		bad("body_timeout", "must be positive, got %v", c.BodyTimeout)
	}
	if c.MaxConnections < 0 {
		bad("max_connections", "must not be negative (0: derived from the descriptor limit), got %d", c.MaxConnections)
	}
	if c.MaxConnectionsPerClient < 1 {
		bad("max_connections_per_client", "must be at least 1, got %d", c.MaxConnectionsPerClient)
	}
	for j, h := range c.AdminHosts {
		if h == "" || strings.ContainsAny(h, ":/ \t") {
			bad(fmt.Sprintf("admin_hosts[%d]", j), "%q: want a host name, without a port", h)
		}
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	names := map[string]int{}
	frontends := map[string]int{}
	for i := range c.Models {
		mc := &c.Models[i]
		if mc.Frontend == "" {
			mc.Frontend = c.Listen
		}
		at := fmt.Sprintf("models[%d]", i)
		mc.check(at, p)
		if j, dup := names[mc.Name]; dup && mc.Name != "" {
			bad(at+".name", "%q already used by models[%d]", mc.Name, j)
		}
		names[mc.Name] = i
		if j, dup := frontends[mc.Frontend]; dup && mc.Frontend != "" {
			bad(at+".frontend", "%q already used by models[%d]", mc.Frontend, j)
		}
		frontends[mc.Frontend] = i
	}
}

// validate checks one model on its own (NewModel); at names it in errors.
func (mc *ModelConfig) Validate(at string) error {
	var p problems
	mc.check(at, &p)
	return p.err("")
}

// check adds a problem for each bad field of the model.
func (mc *ModelConfig) check(at string, p *problems) {
	bad := func(field, format string, a ...any) { p.add(at+"."+field, format, a...) }
	if mc.Name == "" {
		bad("name", "required")
	}
	if strings.ContainsAny(mc.Name, "/ \t\n") {
		bad("name", "%q: no slashes or spaces", mc.Name)
	}
	if mc.Frontend == "" {
		bad("frontend", "required (or set listen)")
	} else if err := checkHostPort(mc.Frontend); err != nil {
		bad("frontend", "%v", err)
	}
	switch {
	case mc.Endpoint != "" && len(mc.Replicas) > 0:
		bad("endpoint", "set either replicas or endpoint+ranks, not both")
	case mc.Endpoint != "":
		if err := checkReplicaURL(mc.Endpoint); err != nil {
			bad("endpoint", "%v", err)
		}
		if mc.Ranks < 1 {
			bad("ranks", "must be at least 1 with endpoint, got %d", mc.Ranks)
		}
	case len(mc.Replicas) == 0:
		bad("replicas", "at least one replica (or endpoint and ranks) is required")
	default:
		if mc.Ranks != 0 {
			bad("ranks", "only with endpoint")
		}
		seen := map[string]int{}
		for j, u := range mc.Replicas {
			if err := checkReplicaURL(u); err != nil {
				bad(fmt.Sprintf("replicas[%d]", j), "%v", err)
				continue
			}
			if k, dup := seen[replicaKey(u)]; dup {
				bad(fmt.Sprintf("replicas[%d]", j), "%q duplicates replicas[%d] (%s): one server counted twice gets twice its share", u, k, mc.Replicas[k])
			}
			seen[replicaKey(u)] = j
		}
	}
	if !mc.SpillThreshold.Auto && mc.SpillThreshold.N < 1 {
		bad("spill_threshold", "must be at least 1 or auto, got %d", mc.SpillThreshold.N)
	}
	if len(mc.SessionHeaders) == 0 {
		bad("session_headers", "at least one header name is required")
	}
	for j, h := range mc.SessionHeaders {
		if !validHeaderName(h) {
			bad(fmt.Sprintf("session_headers[%d]", j), "%q is not a header name", h)
		}
	}
	for j, h := range mc.AgentHeaders {
		if !validHeaderName(h) {
			bad(fmt.Sprintf("agent_headers[%d]", j), "%q is not a header name", h)
		}
	}
	if mc.SessionTTL <= 0 {
		bad("session_ttl", "must be positive, got %v", mc.SessionTTL)
	}
	if _, err := ParsePolicy(mc.Policy); err != nil {
		bad("policy", "%v", err)
	}
	if _, err := vllmlb.ParseStatsMode(mc.VLLMLBStats); err != nil || mc.VLLMLBStats == "" {
		bad("vllm_lb_stats", "%q: want fresh, stale or none", mc.VLLMLBStats)
	}
	if mc.MaxSessions < 0 { // 0, in a config built in code: the default
		bad("max_sessions", "must be at least 1, got %d", mc.MaxSessions)
	}
	for j, src := range mc.PinSources {
		if _, err := ParsePinSource(src); err != nil {
			bad(fmt.Sprintf("pin_sources[%d]", j), "%v", err)
		}
	}
	a := mc.Admission // the zero value (a config built in code) means the defaults
	if _, err := ParseAdmissionMode(string(a.Mode)); a.Mode != "" && err != nil {
		bad("admission.mode", "%q: want auto, queue, spill or off", a.Mode)
	}
	if a.QueueMax < 0 {
		bad("admission.queue_max", "must not be negative, got %d", a.QueueMax)
	}
	if a.Timeout < 0 {
		bad("admission.timeout", "must not be negative, got %v", a.Timeout)
	}
	if a.Fill < 0 || a.Fill > 4 {
		bad("admission.fill", "want a share of the KV capacity in (0, 4], got %v", a.Fill)
	}
	if a.Quantum < 0 {
		bad("admission.quantum", "want a positive multiple of the re-prefill time, got %v", a.Quantum)
	}
}

// ParsePinSource reads one entry of pin_sources: an IP address (one
// client) or a CIDR prefix.
func ParsePinSource(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: want an IP address or a CIDR prefix such as 127.0.0.1 or 10.0.0.0/8", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want host:port", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}

// checkReplicaURL accepts http://host:port (a trailing slash allowed)
// and says plainly what is wrong with anything else: the warden adds the
// API's own paths (/v1/..., /health, /metrics) to the URL, so a path in
// it would send every request and poll somewhere else.
func checkReplicaURL(s string) error {
	if !strings.Contains(s, "://") {
		return fmt.Errorf("%q has no scheme: write http://%s", s, strings.TrimLeft(s, "/"))
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%q: want an http:// URL (the warden speaks plain HTTP to its replicas), got %s://", s, u.Scheme)
	}
	if u.Port() == "" || u.Hostname() == "" {
		return fmt.Errorf("%q: want http://host:port", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("%q: a path (%s) is not allowed: write http://%s, the warden adds /v1/..., /health and /metrics itself", s, u.Path, u.Host)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want http://host:port, without user, query or fragment", s)
	}
	return nil
}

// replicaKey is what makes two replica URLs the same server: host
// (lowercased) and port, whatever else differs (a trailing slash).
func replicaKey(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return strings.ToLower(u.Host)
}

func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}
