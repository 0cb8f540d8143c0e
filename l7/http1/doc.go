// Package http1 is the HTTP/1.x wire format as the shim and the kernel
// datapath need it: bounded request and response heads, body framing,
// the one chunked-body parser (bpf/frame.h is its kernel copy), and the
// rewritten heads the shim forwards. It reads and writes bytes only; no
// sockets, no decisions.
package http1
