package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/maps"
)

// errNoHashKey: `sessions --id` found no key to hash the raw id with.
var errNoHashKey = errors.New("no session-hash key: give --hash-key-file or --config (the warden's hash_key or hash_key_file); " +
	"a warden with neither and no kernel datapath hashes with a random key per process, which nothing outside it can know")

// lookupHash is the keyed hash of the conversation --id (and --agent)
// name, computed here with the warden's key so the raw id never leaves
// this process: from --hash-key-file, else the key in --config, else the
// key pinned beside the kernel datapath's state (--pin-dir).
func lookupHash(f sessionsFlags) (string, error) {
	var key []byte
	switch {
	case f.keyFile != "":
		b, err := os.ReadFile(f.keyFile)
		if err != nil {
			return "", err
		}
		if key, err = hex.DecodeString(strings.TrimSpace(string(b))); err != nil || len(key) != 16 {
			return "", fmt.Errorf("--hash-key-file %s: want 32 hex digits (16 bytes)", f.keyFile)
		}
	case f.configFile != "":
		cfg, err := config.LoadConfig(f.configFile)
		if err != nil {
			return "", err
		}
		if key = cfg.HashKey; key == nil {
			if key, err = maps.ReadHashKey(f.pinDir); err != nil {
				return "", fmt.Errorf("%s sets no hash_key or hash_key_file, and %w", f.configFile, errNoHashKey)
			}
		}
	default:
		var err error
		if key, err = maps.ReadHashKey(f.pinDir); err != nil {
			return "", fmt.Errorf("%w (no key pinned in %s: %v)", errNoHashKey, f.pinDir, err)
		}
	}
	return fmt.Sprintf("%016x", placement.NewSessionHasher(key).Conversation(f.id, f.agent)), nil
}

// onlyConversation keeps the conversation hash names and the ones that
// belong under it (its subagents).
func onlyConversation(resp adminapi.SessionsResponse, hash string) adminapi.SessionsResponse {
	out := adminapi.SessionsResponse{Total: resp.Total, Sessions: []adminapi.SessionInfo{}}
	for _, s := range resp.Sessions {
		if s.Hash == hash || s.Parent == hash {
			out.Sessions = append(out.Sessions, s)
		}
	}
	return out
}
