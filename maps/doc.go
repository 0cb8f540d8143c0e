// Package maps is the ABI between LM Warden's kernel programs (bpf/) and Go:
// it loads the programs, pins their maps and links under /sys/fs/bpf/lmwarden
// (atomically: pin into a temporary directory, attach, rename into place),
// guards that directory with a lock so two wardens never fight over it,
// reuses what a previous warden pinned (the sessions map survives a
// restart), and offers typed accessors for every map. The key and value
// types come from bpf/lmwarden.h through bpf2go; they are aliased here,
// never retyped.
package maps
