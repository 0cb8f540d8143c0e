package picker

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The gRPC health services the protocol asks an endpoint picker to serve
// (grpc.health.v1.Health/Check and Watch):
//
//	""  and "liveness"                        SERVING while the process serves gRPC
//	"readiness" and the ext_proc service name  SERVING while at least one host takes placements
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
)

// NewHealth is the health server for reg: readiness follows reg.Ready. A
// Kubernetes gRPC probe names the service (grpc.service in the probe).
func NewHealth(reg *Registry) *health.Server {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	reg.OnReady(func(ready bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ready {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus(HealthReadiness, st)
		hs.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, st)
	})
	return hs
}
