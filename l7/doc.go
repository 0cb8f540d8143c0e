// Package l7 is the shim: it accepts client connections on a model's
// frontend, reads each request head (l7/http1), asks the placement for a
// replica, dials or reuses an upstream connection, writes the rewritten
// head and hands the bodies to a datapath (l7/datapath: the userspace
// copy, or package kernel). It is the only package of the datapath side
// that talks to the control plane, through the Placer interface.
package l7
