package l7

// defaultDatapath is the datapath of a shim whose Options name none: the
// userspace one. A variable so that the test suite can run every shim test
// over the kernel datapath as well (TestShimSuiteOverKernelDatapath).
var defaultDatapath = func() Datapath { return NewUserPath() }
