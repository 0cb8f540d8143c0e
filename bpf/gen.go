// Package bpf holds LM Warden's BPF programs (lmwarden.c), the one header
// with every map's key and value (lmwarden.h), and their bpf2go output,
// committed so that `go build` needs no clang. `make generate` rebuilds it.
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf -output-stem lmwarden -type frontend_key -type frontend_value -type session -type sock_ctl -type sock_state -type replica_stats -type response_end Lmwarden lmwarden.c
