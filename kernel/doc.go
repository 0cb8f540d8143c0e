// Package kernel is LM Warden's kernel datapath: the datapath.Datapath whose
// bytes move socket to socket in the kernel, over the programs in bpf/ and
// the pinned maps of package maps (docs/kernel.md).
package kernel
