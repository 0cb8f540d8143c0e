// Package vllmmetrics is the one home of vLLM's Prometheus metric names and
// of reading them back: the simulator exports under the first (current)
// name of each list, the warden's poller, the benchmark and `lmwarden sim
// calibrate` parse an exposition and look each quantity up under every
// name a vLLM release has used, newest first. Keeping the lists here means
// a rename in a new vLLM release is one edit, seen by producer and readers
// alike.
package vllmmetrics
