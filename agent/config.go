package agent

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// Defaults of the configuration (docs/config.md lists them for users).
const (
	DefaultAdmin           = "127.0.0.1:9100"
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
)

// DefaultSessionHeaders are the request headers that carry a session id, in
// the order they are tried: Claude Code's, then the generic one.
var DefaultSessionHeaders = []string{"X-Claude-Code-Session-Id", "X-Session-Id"}

// Config is the whole daemon configuration (lmwarden.yaml).
type Config struct {
	// Listen is the frontend of models that name none (and what --listen
	// overrides when there is one model).
	Listen string
	// Admin is the admin HTTP address (API, /metrics, dashboard); "" disables it.
	Admin string
	// Datapath is auto, kernel (msg, else skb), msg, skb or user.
	Datapath string
	// PollInterval is how often every replica's /metrics (and /health) is read.
	PollInterval time.Duration
	// PollTimeout bounds one scrape.
	PollTimeout time.Duration
	// UnhealthyAfter failed polls in a row make a replica unhealthy; one good
	// poll makes it healthy again.
	UnhealthyAfter int
	// HitRateWindow is the window of the prefix-cache hit rate.
	HitRateWindow time.Duration
	// HashKey is the 16-byte key of the session-id hash. nil: random per
	// process (session hashes then change across restarts).
	HashKey []byte
	Models  []ModelConfig
}

// ModelConfig is one served model: its frontend, its replicas in one of the
// two deployment shapes, and its placement settings.
type ModelConfig struct {
	Name     string
	Frontend string
	// Shape 1: one URL per replica.
	Replicas []string
	// Shape 2: one URL and a rank count; the shim writes X-data-parallel-rank.
	Endpoint string
	Ranks    int

	Affinity       bool
	SpillThreshold SpillThreshold
	SessionHeaders []string
	SessionTTL     time.Duration
	Policy         Policy
	// VLLMLBStats is the stats mode of the vllm-lb emulation: fresh, stale, none.
	VLLMLBStats string
	// Admission is policy cost's cache-capacity admission (agent/admission.go).
	Admission AdmissionConfig
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
// from what the replica can batch; see placement.go).
type SpillThreshold struct {
	Auto bool
	N    int
}

func (s SpillThreshold) String() string {
	if s.Auto {
		return "auto"
	}
	return strconv.Itoa(s.N)
}

// UnmarshalYAML accepts an integer or the word auto.
func (s *SpillThreshold) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or auto", n.Line)
	}
	if n.Value == "auto" {
		*s = SpillThreshold{Auto: true}
		return nil
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: want a number or auto, got %q", n.Line, n.Value)
	}
	*s = SpillThreshold{N: v}
	return nil
}

// The file format: pointers tell "absent" (default applies) from zero.
type rawConfig struct {
	Listen         string        `yaml:"listen"`
	Admin          *string       `yaml:"admin"`
	Datapath       string        `yaml:"datapath"`
	PollInterval   time.Duration `yaml:"poll_interval"`
	PollTimeout    time.Duration `yaml:"poll_timeout"`
	UnhealthyAfter int           `yaml:"unhealthy_after"`
	HitRateWindow  time.Duration `yaml:"hit_rate_window"`
	HashKey        string        `yaml:"hash_key"`
	Models         []rawModel    `yaml:"models"`
}

type rawModel struct {
	Name           string          `yaml:"name"`
	Frontend       string          `yaml:"frontend"`
	Replicas       []string        `yaml:"replicas"`
	Endpoint       string          `yaml:"endpoint"`
	Ranks          int             `yaml:"ranks"`
	Affinity       *bool           `yaml:"affinity"`
	SpillThreshold *SpillThreshold `yaml:"spill_threshold"`
	SessionHeaders []string        `yaml:"session_headers"`
	SessionTTL     time.Duration   `yaml:"session_ttl"`
	Policy         string          `yaml:"policy"`
	VLLMLBStats    string          `yaml:"vllm_lb_stats"`
	Admission      *rawAdmission   `yaml:"admission"`
}

// rawAdmission is a model's `admission:` block; absent fields keep their
// defaults (DefaultAdmission).
type rawAdmission struct {
	Mode     string        `yaml:"mode"`
	QueueMax int           `yaml:"queue_max"`
	Timeout  time.Duration `yaml:"timeout"`
	Fill     float64       `yaml:"fill"`
}

// DefaultConfig is the configuration of `lmwarden serve` without a file: one
// model named "default" whose replicas and frontend come from flags.
func DefaultConfig() *Config {
	c := &Config{}
	c.applyDefaults()
	c.Models = []ModelConfig{defaultModel(DefaultModelName)}
	return c
}

func defaultModel(name string) ModelConfig {
	return ModelConfig{
		Name:           name,
		Affinity:       true,
		SpillThreshold: SpillThreshold{N: DefaultSpillThreshold},
		SessionHeaders: append([]string(nil), DefaultSessionHeaders...),
		SessionTTL:     DefaultSessionTTL,
		Policy:         DefaultPolicy,
		VLLMLBStats:    DefaultVLLMLBStatsMode,
		Admission:      DefaultAdmission,
	}
}

func (c *Config) applyDefaults() {
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
}

// LoadConfig reads, decodes (unknown fields are errors) and validates a file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates YAML text.
func ParseConfig(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawConfig
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c := &Config{
		Listen:         raw.Listen,
		Datapath:       raw.Datapath,
		PollInterval:   raw.PollInterval,
		PollTimeout:    raw.PollTimeout,
		UnhealthyAfter: raw.UnhealthyAfter,
		HitRateWindow:  raw.HitRateWindow,
	}
	if raw.Admin != nil {
		c.Admin = *raw.Admin
		if c.Admin == "" {
			c.Admin = "off" // explicit empty: no admin server
		}
	}
	c.applyDefaults()
	if c.Admin == "off" {
		c.Admin = ""
	}
	if raw.HashKey != "" {
		k, err := hex.DecodeString(raw.HashKey)
		if err != nil || len(k) != 16 {
			return nil, fmt.Errorf("%w: hash_key: want 32 hex digits (16 bytes)", ErrInvalidConfig)
		}
		c.HashKey = k
	}
	for _, rm := range raw.Models {
		mc := defaultModel(rm.Name)
		mc.Frontend = rm.Frontend
		mc.Replicas = rm.Replicas
		mc.Endpoint = rm.Endpoint
		mc.Ranks = rm.Ranks
		if rm.Affinity != nil {
			mc.Affinity = *rm.Affinity
		}
		if rm.SpillThreshold != nil {
			mc.SpillThreshold = *rm.SpillThreshold
		}
		if rm.SessionHeaders != nil {
			mc.SessionHeaders = rm.SessionHeaders
		}
		if rm.SessionTTL != 0 {
			mc.SessionTTL = rm.SessionTTL
		}
		if rm.Policy != "" {
			mc.Policy = Policy(rm.Policy)
		}
		if rm.VLLMLBStats != "" {
			mc.VLLMLBStats = rm.VLLMLBStats
		}
		if a := rm.Admission; a != nil {
			if a.Mode != "" {
				mc.Admission.Mode = AdmissionMode(a.Mode)
			}
			if a.QueueMax != 0 {
				mc.Admission.QueueMax = a.QueueMax
			}
			if a.Timeout != 0 {
				mc.Admission.Timeout = a.Timeout
			}
			if a.Fill != 0 {
				mc.Admission.Fill = a.Fill
			}
		}
		c.Models = append(c.Models, mc)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

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

// Validate checks every field and names the first bad one, e.g.
// `models[1].replicas[0]: ...`. Models without a frontend take Listen.
func (c *Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, a...))
	}
	if c.Admin != "" {
		if err := checkHostPort(c.Admin); err != nil {
			return bad("admin", "%v", err)
		}
	}
	switch c.Datapath {
	case "auto", "kernel", "msg", "skb", "user":
	default:
		return bad("datapath", "%q: want auto, kernel, msg, skb or user", c.Datapath)
	}
	if c.PollInterval <= 0 {
		return bad("poll_interval", "must be positive, got %v", c.PollInterval)
	}
	if c.PollTimeout <= 0 {
		return bad("poll_timeout", "must be positive, got %v", c.PollTimeout)
	}
	if c.UnhealthyAfter < 1 {
		return bad("unhealthy_after", "must be at least 1, got %d", c.UnhealthyAfter)
	}
	if c.HitRateWindow < c.PollInterval {
		return bad("hit_rate_window", "%v is shorter than poll_interval %v", c.HitRateWindow, c.PollInterval)
	}
	if c.HashKey != nil && len(c.HashKey) != 16 {
		return bad("hash_key", "want 16 bytes, got %d", len(c.HashKey))
	}
	if c.Listen != "" {
		if err := checkHostPort(c.Listen); err != nil {
			return bad("listen", "%v", err)
		}
	}
	if len(c.Models) == 0 {
		return bad("models", "at least one model is required")
	}
	names := map[string]int{}
	frontends := map[string]int{}
	for i := range c.Models {
		mc := &c.Models[i]
		if mc.Frontend == "" {
			mc.Frontend = c.Listen
		}
		if err := mc.validate(fmt.Sprintf("models[%d]", i)); err != nil {
			return err
		}
		if j, dup := names[mc.Name]; dup {
			return bad(fmt.Sprintf("models[%d].name", i), "%q already used by models[%d]", mc.Name, j)
		}
		names[mc.Name] = i
		if j, dup := frontends[mc.Frontend]; dup {
			return bad(fmt.Sprintf("models[%d].frontend", i), "%q already used by models[%d]", mc.Frontend, j)
		}
		frontends[mc.Frontend] = i
	}
	return nil
}

func (mc *ModelConfig) validate(at string) error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s.%s: %s", ErrInvalidConfig, at, field, fmt.Sprintf(format, a...))
	}
	if mc.Name == "" {
		return bad("name", "required")
	}
	if strings.ContainsAny(mc.Name, "/ \t\n") {
		return bad("name", "%q: no slashes or spaces", mc.Name)
	}
	if mc.Frontend == "" {
		return bad("frontend", "required (or set listen)")
	}
	if err := checkHostPort(mc.Frontend); err != nil {
		return bad("frontend", "%v", err)
	}
	switch {
	case mc.Endpoint != "" && len(mc.Replicas) > 0:
		return bad("endpoint", "set either replicas or endpoint+ranks, not both")
	case mc.Endpoint != "":
		if err := checkReplicaURL(mc.Endpoint); err != nil {
			return bad("endpoint", "%v", err)
		}
		if mc.Ranks < 1 {
			return bad("ranks", "must be at least 1 with endpoint, got %d", mc.Ranks)
		}
	case len(mc.Replicas) == 0:
		return bad("replicas", "at least one replica (or endpoint and ranks) is required")
	default:
		if mc.Ranks != 0 {
			return bad("ranks", "only with endpoint")
		}
		seen := map[string]int{}
		for j, u := range mc.Replicas {
			if err := checkReplicaURL(u); err != nil {
				return bad(fmt.Sprintf("replicas[%d]", j), "%v", err)
			}
			if k, dup := seen[u]; dup {
				return bad(fmt.Sprintf("replicas[%d]", j), "%q duplicates replicas[%d]", u, k)
			}
			seen[u] = j
		}
	}
	if !mc.SpillThreshold.Auto && mc.SpillThreshold.N < 1 {
		return bad("spill_threshold", "must be at least 1 or auto, got %d", mc.SpillThreshold.N)
	}
	if len(mc.SessionHeaders) == 0 {
		return bad("session_headers", "at least one header name is required")
	}
	for j, h := range mc.SessionHeaders {
		if !validHeaderName(h) {
			return bad(fmt.Sprintf("session_headers[%d]", j), "%q is not a header name", h)
		}
	}
	if mc.SessionTTL <= 0 {
		return bad("session_ttl", "must be positive, got %v", mc.SessionTTL)
	}
	if _, err := parsePolicy(mc.Policy); err != nil {
		return bad("policy", "%v", err)
	}
	if _, err := vllmlb.ParseStatsMode(mc.VLLMLBStats); err != nil || mc.VLLMLBStats == "" {
		return bad("vllm_lb_stats", "%q: want fresh, stale or none", mc.VLLMLBStats)
	}
	a := mc.Admission // the zero value (a config built in code) means the defaults
	if _, err := ParseAdmissionMode(string(a.Mode)); a.Mode != "" && err != nil {
		return bad("admission.mode", "%q: want off, spill or queue", a.Mode)
	}
	if a.QueueMax < 0 {
		return bad("admission.queue_max", "must not be negative, got %d", a.QueueMax)
	}
	if a.Timeout < 0 {
		return bad("admission.timeout", "must not be negative, got %v", a.Timeout)
	}
	if a.Fill < 0 || a.Fill > 4 {
		return bad("admission.fill", "want a share of the KV capacity in (0, 4], got %v", a.Fill)
	}
	return nil
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

func checkReplicaURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%q: want an http:// URL", s)
	}
	if u.Port() == "" || u.Hostname() == "" {
		return fmt.Errorf("%q: want http://host:port", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
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
