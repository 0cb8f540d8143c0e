package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/picker"
)

func init() {
	register("picker", "the endpoint picker over several hosts' wardens (Envoy ext_proc, HAProxy SPOE)", runPicker)
}

func runPicker(args []string) error {
	fs := flag.NewFlagSet("picker", flag.ContinueOnError)
	var hosts repeatedFlag
	fs.Var(&hosts, "host", "a host: its warden's frontend IP:PORT, its admin API on the same IP at --host-admin-port, or IP:PORT=ADMIN_URL (repeat)")
	dnsName := fs.String("hosts-dns", "", "find the hosts by resolving this name (a headless Service over the warden pods); every address is a host")
	hostPort := fs.Int("host-port", 8000, "with --hosts-dns: the wardens' frontend port")
	adminPort := fs.Int("host-admin-port", picker.DefaultAdminPort, "the port of each host warden's admin API (hosts given as IP:PORT, or found by DNS)")
	dnsInterval := fs.Duration("dns-interval", picker.DefaultDiscoveryInterval, "with --hosts-dns: how often the name is resolved again")
	model := fs.String("model", "", "the model's name on the hosts' wardens (default: each host serves exactly one)")
	grpcAddr := fs.String("grpc", "0.0.0.0:9002", "ext_proc and gRPC health listen address (off: none)")
	adminAddr := fs.String("admin", "127.0.0.1:9200", "admin API, /metrics, /healthz, /readyz (off: none)")
	spoeAddr := fs.String("spoe", "off", "HAProxy SPOE agent listen address (off: none)")
	policy := fs.String("policy", string(config.PolicySticky), "placement over the hosts: "+servePolicyNames())
	var sessionHeaders repeatedFlag
	fs.Var(&sessionHeaders, "session-header", "a request header that carries the session id, first present wins (repeat; default "+strings.Join(config.DefaultSessionHeaders, ", ")+")")
	sessionTTL := fs.Duration("session-ttl", config.DefaultSessionTTL, "how long an idle conversation stays on its host")
	spill := fs.String("spill-threshold", fmt.Sprint(picker.DefaultSpillThreshold), "requests in flight on a host at which a conversation's request goes elsewhere (a number, or auto)")
	hashKeyFile := fs.String("hash-key-file", "", "file holding the session-hash key, 32 hex digits (the hosts' hash_key, to learn their conversations); default: a random key")
	pollInterval := fs.Duration("poll-interval", picker.DefaultPollInterval, "how often each host's warden is read")
	pollTimeout := fs.Duration("poll-timeout", picker.DefaultPollTimeout, "how long one read may take")
	unhealthyAfter := fs.Int("unhealthy-after", picker.DefaultUnhealthyAfter, "failed reads in a row that take a host out")
	fallbacks := fs.Int("fallbacks", picker.DefaultFallbacks, "other hosts listed after the pick, least loaded first, for a gateway that retries (0: none)")
	servedReport := fs.String("served-report", string(picker.ServedReportAuto), "when the gateway is asked for the response head with the served endpoint: auto (only while the picked host is in doubt and fallbacks are listed; needs the filter's allow_mode_override) or always")
	shed := fs.Float64("shed-waiting", 0, "answer 429 to a new conversation when every host has this many requests waiting per ready replica (0: never)")
	sessionSync := fs.Duration("session-sync", picker.DefaultSessionSync, "how often each host's conversations are read (0: never); needs --hash-key-file")
	destNS := fs.String("destination-namespace", picker.DestinationNamespace, "metadata namespace of the pick and of the served endpoint")
	subsetNS := fs.String("subset-namespace", picker.SubsetNamespace, "metadata namespace of the subset hint")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long open streams may finish")
	var logf logFlags
	logf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := logf.logger()
	if err != nil {
		return err
	}
	cfg := picker.ServerConfig{
		Config: picker.Config{
			Model: *model, Policy: config.Policy(*policy), SessionHeaders: sessionHeaders, SessionTTL: *sessionTTL,
			PollInterval: *pollInterval, PollTimeout: *pollTimeout, UnhealthyAfter: *unhealthyAfter,
			ShedWaiting: *shed, SessionSync: *sessionSync, Logger: log,
		},
		GRPC: offAddr(*grpcAddr), Admin: offAddr(*adminAddr), SPOE: offAddr(*spoeAddr),
		Namespaces: picker.Namespaces{Destination: *destNS, Subset: *subsetNS},
		Build:      buildInfo(),
	}
	cfg.Fallbacks = *fallbacks
	if *fallbacks == 0 {
		cfg.Fallbacks = -1 // none: the Config's 0 means the default
	}
	if *spill == "auto" {
		cfg.SpillThreshold = config.SpillThreshold{Auto: true}
	} else if _, err := fmt.Sscan(*spill, &cfg.SpillThreshold.N); err != nil || cfg.SpillThreshold.N < 1 {
		return fmt.Errorf("--spill-threshold %q: want a number >= 1 or auto: %w", *spill, errUsage)
	}
	if _, err := parsePolicyName(*policy); err != nil {
		return fmt.Errorf("--policy %v: %w", err, errUsage)
	}
	if cfg.ServedReport, err = picker.ParseServedReport(*servedReport); err != nil {
		return fmt.Errorf("--served-report %q: want auto or always: %w", *servedReport, errUsage)
	}
	if *shed < 0 {
		return fmt.Errorf("--shed-waiting %v: want 0 or more: %w", *shed, errUsage)
	}
	if *hashKeyFile != "" {
		if cfg.HashKey, err = readHashKey(*hashKeyFile); err != nil {
			return err
		}
	} else {
		cfg.SessionSync = 0 // a random key never matches the hosts' hashes
	}
	switch {
	case len(hosts) > 0 && *dnsName != "":
		return fmt.Errorf("--host and --hosts-dns: give one or the other: %w", errUsage)
	case len(hosts) > 0:
		if cfg.Hosts, err = picker.ParseHosts(hosts, *adminPort); err != nil {
			return fmt.Errorf("%v: %w", err, errUsage)
		}
	case *dnsName != "":
		cfg.Discover = &picker.Discovery{Name: *dnsName, Port: *hostPort, AdminPort: *adminPort, Interval: *dnsInterval}
	default:
		return fmt.Errorf("no hosts: give --host (repeat) or --hosts-dns: %w", errUsage)
	}
	if cfg.GRPC == "" && cfg.SPOE == "" {
		return fmt.Errorf("--grpc and --spoe are both off: nothing would ask for a pick: %w", errUsage)
	}

	s, err := picker.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	log.Info("picker serving", "grpc", s.GRPCAddr(), "admin", s.AdminAddr(), "spoe", s.SPOEAddr(), "hosts", len(s.Registry().Hosts()), "policy", *policy)
	<-ctx.Done()
	log.Info("picker shutting down", "timeout", *shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		log.Warn("streams still open at the shutdown timeout were cut", "err", err)
	}
	return nil
}

func offAddr(a string) string {
	if a == "off" {
		return ""
	}
	return a
}

func parsePolicyName(p string) (config.Policy, error) {
	for _, q := range config.Policies() {
		if string(q) == p {
			return q, nil
		}
	}
	return "", fmt.Errorf("%q: want one of %s", p, servePolicyNames())
}

// readHashKey reads a session-hash key file: 32 hex digits (surrounding
// space and a final newline allowed), as a Kubernetes Secret mounts it.
func readHashKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--hash-key-file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 16 {
		return nil, fmt.Errorf("--hash-key-file %s: want 32 hex digits (16 bytes)", path)
	}
	return key, nil
}
