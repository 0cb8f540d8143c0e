// Package kubernetes holds no code of the daemon: its folder has the
// manifests that run LM Warden on Kubernetes (a warden DaemonSet on the GPU
// nodes, the picker's Deployment and Service, the InferencePool and
// HTTPRoute of a Gateway API Inference Extension gateway;
// docs/multihost.md). Its test decodes each manifest into the real API
// types, unknown fields refused, and checks what must agree between them.
package kubernetes
