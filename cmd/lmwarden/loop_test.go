package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestCheckNoLoopRefusesAReplicaOnAFrontend(t *testing.T) {
	model := func(front string, replicas ...string) config.ModelConfig {
		return config.ModelConfig{Name: "m", Frontend: front, Replicas: replicas}
	}
	cases := []struct {
		name  string
		model config.ModelConfig
		field string // "" = no loop
	}{
		{"same address", model("127.0.0.1:8000", "http://127.0.0.1:8100", "http://127.0.0.1:8000"), "models[0].replicas[1]"},
		{"hostname", model("127.0.0.1:8000", "http://localhost:8000"), "models[0].replicas[0]"},
		{"wildcard frontend", model(":8000", "http://127.0.0.1:8000"), "models[0].replicas[0]"},
		{"endpoint", config.ModelConfig{Name: "m", Frontend: "127.0.0.1:8000", Endpoint: "http://127.0.0.1:8000", Ranks: 2}, "models[0].endpoint"},
		{"other port", model("127.0.0.1:8000", "http://127.0.0.1:8100"), ""},
		{"other address", model("127.0.0.2:8000", "http://127.0.0.1:8000"), ""},
	}
	for _, c := range cases {
		err := checkNoLoop(&config.Config{Models: []config.ModelConfig{c.model}})
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.field != "" && (!errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(fmtErr(err), c.field)):
			t.Errorf("%s: %v, want an invalid-config error naming %s", c.name, err, c.field)
		}
	}
	// One model's replica on another model's frontend loops as well.
	cfg := &config.Config{Models: []config.ModelConfig{model("127.0.0.1:8000", "http://127.0.0.1:8100"), model("127.0.0.1:8001", "http://127.0.0.1:8000")}}
	if err := checkNoLoop(cfg); err == nil || !strings.Contains(err.Error(), "models[1].replicas[0]") {
		t.Errorf("cross-model loop: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
