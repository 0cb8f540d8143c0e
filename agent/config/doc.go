// Package config is lmwarden.yaml: the daemon's and each model's settings
// with their defaults, the YAML decoding that names every problem's field
// and line, and validation (docs/config.md). The policy names and the
// admission settings are here because the file chooses them; what they do
// is agent/placement's.
package config
