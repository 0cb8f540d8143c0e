package l7

import "github.com/lmwarden/lmwarden/l7/datapath"

// defaultDatapath is the datapath of a shim whose Options name none: the
// userspace one; defaultDial the dial function of a pool the shim makes
// itself (nil: a plain dialer). Variables so that the test suite can run
// every shim test over each kernel datapath as well
// (TestShimSuiteOverKernelDatapaths, export_test.go).
var (
	defaultDatapath = func() datapath.Datapath { return datapath.NewUserPath() }
	defaultDial     DialFunc
)
