// Package datapath is the contract between the shim (package l7) and
// whatever moves an exchange's bodies: the Exchange the shim fills, the
// Conn that never hides the bytes it read ahead, the Datapath interface
// and the optional steps a kernel datapath takes part in, the CutState of
// a response cut short, and UserPath, the userspace datapath that copies
// with splice(2). The kernel datapath (package kernel) implements it
// without linking the shim or the control plane.
package datapath
