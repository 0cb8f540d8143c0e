package kubernetes

// The InferencePool API (inference.networking.k8s.io/v1) as the Gateway
// API Inference Extension publishes it, for the manifest test: its Go
// module is not served by the module proxy this project builds from, so
// the fields the manifests use are declared here from the published
// reference (spec.selector.matchLabels, spec.targetPorts[].number,
// spec.appProtocol, spec.endpointPickerRef{group, kind, name,
// port.number, failureMode}); a field it does not declare is refused.

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// InferencePoolGroupVersion is the API group and version the extension
// publishes the InferencePool in.
const InferencePoolGroupVersion = "inference.networking.k8s.io/v1"

// InferencePool is one pool of model server endpoints.
type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferencePoolSpec `json:"spec"`
}

// InferencePoolSpec is the pool's desired state.
type InferencePoolSpec struct {
	Selector          LabelSelector      `json:"selector"`
	TargetPorts       []Port             `json:"targetPorts"`
	AppProtocol       string             `json:"appProtocol,omitempty"`
	EndpointPickerRef *EndpointPickerRef `json:"endpointPickerRef,omitempty"`
}

// LabelSelector selects the pool's pods by label (matchLabels only).
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Port is a port number.
type Port struct {
	Number int32 `json:"number"`
}

// EndpointPickerRef names the endpoint picker's Service.
type EndpointPickerRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        string  `json:"kind,omitempty"`
	Name        string  `json:"name"`
	Port        *Port   `json:"port,omitempty"`
	FailureMode string  `json:"failureMode,omitempty"`
}
