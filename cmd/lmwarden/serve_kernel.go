package main

// The kernel datapath is built in: `serve --datapath kernel` (and auto)
// load it through the hook serve.go declares.
func init() { kernelDatapath = loadKernelDatapath }
