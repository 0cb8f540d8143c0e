// Package bpf holds LM Warden's BPF programs (lmwarden.c), the one header
// with every map's key and value (lmwarden.h), the kernel interface they
// use (include/lmw_uapi.h, so the build reads no header from the host), and
// their bpf2go output, committed so that `go build` needs no clang.
// `make generate` rebuilds it; `make test` checks that doing so changes
// nothing (where clang is installed).
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -nostdinc" -target bpfel -go-package bpf -output-stem lmwarden -type frontend_key -type frontend_value -type conn_key -type own_conn -type session -type sock_ctl -type sock_state -type frame -type replica_stats -type response_end Lmwarden lmwarden.c
