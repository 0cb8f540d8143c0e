package kubernetes

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/picker"
)

// manifests decodes every file of the folder into its API type, strictly:
// an unknown or duplicated field is an error, as it is for kubectl apply
// with server-side field validation.
type manifests struct {
	namespaces []*corev1.Namespace
	secrets    []*corev1.Secret
	configMaps []*corev1.ConfigMap
	daemonSets []*appsv1.DaemonSet
	deploys    []*appsv1.Deployment
	services   []*corev1.Service
	pools      []*InferencePool
	routes     []*gatewayv1.HTTPRoute
}

func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := &manifests{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		switch tm.Kind {
		case "Namespace":
			decodeInto(t, f, b, tm, "v1", &m.namespaces)
		case "Secret":
			decodeInto(t, f, b, tm, "v1", &m.secrets)
		case "ConfigMap":
			decodeInto(t, f, b, tm, "v1", &m.configMaps)
		case "DaemonSet":
			decodeInto(t, f, b, tm, "apps/v1", &m.daemonSets)
		case "Deployment":
			decodeInto(t, f, b, tm, "apps/v1", &m.deploys)
		case "Service":
			decodeInto(t, f, b, tm, "v1", &m.services)
		case "InferencePool":
			decodeInto(t, f, b, tm, InferencePoolGroupVersion, &m.pools)
		case "HTTPRoute":
			decodeInto(t, f, b, tm, "gateway.networking.k8s.io/v1", &m.routes)
		default:
			t.Errorf("%s: kind %q has no API type in this test", f, tm.Kind)
		}
	}
	if len(m.daemonSets) != 1 || len(m.deploys) != 1 || len(m.pools) != 1 || len(m.secrets) != 1 || len(m.configMaps) != 1 || len(m.routes) != 1 {
		t.Fatalf("want one DaemonSet, Deployment, InferencePool, Secret, ConfigMap and HTTPRoute; have %d %d %d %d %d %d",
			len(m.daemonSets), len(m.deploys), len(m.pools), len(m.secrets), len(m.configMaps), len(m.routes))
	}
	return m
}

// decodeInto decodes file f (of kind tm.Kind) strictly into a new T and
// appends it to list.
func decodeInto[T any](t *testing.T, f string, b []byte, tm metav1.TypeMeta, want string, list *[]*T) {
	t.Helper()
	if tm.APIVersion != want {
		t.Errorf("%s: apiVersion %q, want %q for a %s", f, tm.APIVersion, want, tm.Kind)
	}
	v := new(T)
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Errorf("%s: %v", f, err)
	}
	*list = append(*list, v)
}

func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// flagValue reads --name=value or --name value from a container's args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func mountPath(c corev1.Container, volume string) string {
	for _, v := range c.VolumeMounts {
		if v.Name == volume {
			return v.MountPath
		}
	}
	return ""
}

func TestEveryManifestDecodesIntoItsAPIType(t *testing.T) {
	m := load(t)
	for _, ns := range []string{m.daemonSets[0].Namespace, m.deploys[0].Namespace, m.pools[0].Namespace, m.secrets[0].Namespace} {
		if ns != m.namespaces[0].Name {
			t.Errorf("namespace %q, the manifests' is %q", ns, m.namespaces[0].Name)
		}
	}
}

// The warden DaemonSet: the node's network, its bpffs and cgroup root, the
// three capabilities and nothing more, probes on the admin API, a grace
// period above the shutdown timeout, the key from the Secret, and a
// configuration the warden itself accepts.
func TestWardenDaemonSet(t *testing.T) {
	m := load(t)
	ds := m.daemonSets[0]
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Error("the warden must run in the node's network namespace (hostNetwork, dnsPolicy ClusterFirstWithHostNet): its kernel datapath steers the node's port")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	var add []string
	for _, cp := range sc.Capabilities.Add {
		add = append(add, string(cp))
	}
	slices.Sort(add)
	if !slices.Equal(add, []string{"BPF", "NET_ADMIN", "PERFMON"}) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("capabilities add %v drop %v, want exactly BPF, NET_ADMIN, PERFMON and drop ALL (scripts/lmwarden.service's)", add, sc.Capabilities.Drop)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: the three capabilities are all the warden needs")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for vol, path := range map[string]string{"bpffs": "/sys/fs/bpf", "cgroup": "/sys/fs/cgroup"} {
		if hostPaths[vol] != path || mountPath(c, vol) != path {
			t.Errorf("volume %s: hostPath %q mounted at %q, want %s at %s", vol, hostPaths[vol], mountPath(c, vol), path, path)
		}
	}
	admin := containerPort(c, "admin")
	for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[what]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || (p.HTTPGet.Port.String() != "admin" && p.HTTPGet.Port.IntValue() != int(admin)) {
			t.Errorf("%s probe: want GET %s on the admin port", what, want)
		}
	}
	shutdown, err := time.ParseDuration(flagValue(c.Args, "shutdown-timeout"))
	if err != nil {
		t.Fatalf("--shutdown-timeout: %v", err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
		t.Errorf("terminationGracePeriodSeconds must be above --shutdown-timeout %v", shutdown)
	}

	// The configuration, read by the warden's own loader, with the key
	// file where the Secret is mounted.
	cm := m.configMaps[0]
	text := cm.Data["lmwarden.yaml"]
	if flagValue(c.Args, "config") != mountPath(c, "config") {
		t.Errorf("--config %q is not where the ConfigMap is mounted (%q)", flagValue(c.Args, "config"), mountPath(c, "config"))
	}
	keyDir := mountPath(c, "session-key")
	var secretVolume string
	for _, v := range pod.Volumes {
		if v.Name == "session-key" && v.Secret != nil {
			secretVolume = v.Secret.SecretName
		}
	}
	if secretVolume != m.secrets[0].Name {
		t.Errorf("the session-key volume is Secret %q, the manifests' is %q", secretVolume, m.secrets[0].Name)
	}
	key := m.secrets[0].StringData["hash-key"]
	if b, err := hex.DecodeString(key); err != nil || len(b) != 16 {
		t.Errorf("the Secret's hash-key %q is not 32 hex digits", key)
	}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "hash-key"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	inFile := keyDir + "/hash-key"
	if !strings.Contains(text, "hash_key_file: "+inFile) {
		t.Fatalf("the config's hash_key_file is not the Secret's %s", inFile)
	}
	// The admin token: the Secret's admin-token, mounted alone (subPath)
	// where admin_token_file says, and refused while it is the placeholder.
	tokenFile := ""
	for _, vm := range c.VolumeMounts {
		if vm.Name == "session-key" && vm.SubPath == "admin-token" {
			tokenFile = vm.MountPath
		}
	}
	if tokenFile == "" || !strings.Contains(text, "admin_token_file: "+tokenFile) {
		t.Errorf("the config's admin_token_file is not the Secret's admin-token mounted with subPath (%q)", tokenFile)
	}
	placeholder := filepath.Join(tmp, "admin.token")
	if err := os.WriteFile(placeholder, []byte(m.secrets[0].StringData["admin-token"]), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.LoadAdminToken(placeholder); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Errorf("the warden takes the Secret's placeholder admin token: %v", err)
	}
	cfg, err := config.ParseConfig([]byte(strings.ReplaceAll(text, inFile, filepath.Join(tmp, "hash-key"))))
	if err != nil {
		t.Fatalf("the warden refuses its config: %v", err)
	}
	if !strings.HasSuffix(cfg.Admin, fmt.Sprintf(":%d", admin)) || !strings.HasPrefix(cfg.Admin, "0.0.0.0:") {
		t.Errorf("config admin %q: the picker and the probes read it on the node's port %d", cfg.Admin, admin)
	}
	if fe := cfg.Models[0].Frontend; fe != fmt.Sprintf("0.0.0.0:%d", containerPort(c, "frontend")) {
		t.Errorf("config frontend %q, the container's frontend port is %d", fe, containerPort(c, "frontend"))
	}
}

// The picker's Deployment, its Service, the headless Service of the hosts,
// the InferencePool and the HTTPRoute agree with each other and with the
// warden DaemonSet.
func TestPickerPoolAndRouteAgree(t *testing.T) {
	m := load(t)
	ds, dep, pool, route := m.daemonSets[0], m.deploys[0], m.pools[0], m.routes[0]
	warden := ds.Spec.Template.Spec.Containers[0]
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "picker" {
		t.Fatalf("the Deployment runs %q, want lmwarden picker", c.Args[0])
	}

	hosts := m.service("lmwarden-hosts")
	if hosts == nil || hosts.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatal("no headless Service lmwarden-hosts")
	}
	if want := fmt.Sprintf("%s.%s.svc.cluster.local", hosts.Name, hosts.Namespace); flagValue(c.Args, "hosts-dns") != want {
		t.Errorf("--hosts-dns %q, want the headless Service %s", flagValue(c.Args, "hosts-dns"), want)
	}
	labels := ds.Spec.Template.Labels
	for k, v := range hosts.Spec.Selector {
		if labels[k] != v {
			t.Errorf("the hosts' Service selects %s=%s, the warden pods are %v", k, v, labels)
		}
	}
	if flagValue(c.Args, "host-port") != fmt.Sprint(containerPort(warden, "frontend")) || flagValue(c.Args, "host-admin-port") != fmt.Sprint(containerPort(warden, "admin")) {
		t.Errorf("--host-port %s --host-admin-port %s, the wardens' ports are %d and %d",
			flagValue(c.Args, "host-port"), flagValue(c.Args, "host-admin-port"), containerPort(warden, "frontend"), containerPort(warden, "admin"))
	}

	grpc := containerPort(c, "grpc")
	if !strings.HasSuffix(flagValue(c.Args, "grpc"), fmt.Sprintf(":%d", grpc)) {
		t.Errorf("--grpc %q, the container's grpc port is %d", flagValue(c.Args, "grpc"), grpc)
	}
	for what, p := range map[string]*corev1.Probe{picker.HealthLiveness: c.LivenessProbe, picker.HealthReadiness: c.ReadinessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != grpc || p.GRPC.Service == nil || *p.GRPC.Service != what {
			t.Errorf("%s probe: want the gRPC health service %q on port %d", what, what, grpc)
		}
	}
	shutdown, err := time.ParseDuration(flagValue(c.Args, "shutdown-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	if g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
		t.Errorf("the picker's terminationGracePeriodSeconds must be above --shutdown-timeout %v", shutdown)
	}
	if !strings.HasPrefix(flagValue(c.Args, "hash-key-file"), mountPath(c, "session-key")+"/") {
		t.Errorf("--hash-key-file %q is not in the Secret's mount %q", flagValue(c.Args, "hash-key-file"), mountPath(c, "session-key"))
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 {
		t.Error("the picker needs no privilege: runAsNonRoot, no capability added")
	}

	svc := m.service(pool.Spec.EndpointPickerRef.Name)
	if svc == nil {
		t.Fatalf("the InferencePool's endpointPickerRef names Service %q, which the manifests lack", pool.Spec.EndpointPickerRef.Name)
	}
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == pool.Spec.EndpointPickerRef.Port.Number {
			svcPort = &svc.Spec.Ports[i]
		}
	}
	if svcPort == nil || (svcPort.TargetPort.String() != "grpc" && svcPort.TargetPort.IntValue() != int(grpc)) {
		t.Errorf("endpointPickerRef port %d does not reach the picker's grpc port", pool.Spec.EndpointPickerRef.Port.Number)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the picker's Service selects %s=%s, the picker's pods are %v", k, v, dep.Spec.Template.Labels)
		}
	}
	if fm := pool.Spec.EndpointPickerRef.FailureMode; fm != "FailOpen" && fm != "FailClose" {
		t.Errorf("failureMode %q, want FailOpen or FailClose", fm)
	}
	for k, v := range pool.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the pool selects %s=%s, the warden pods are %v", k, v, labels)
		}
	}
	if len(pool.Spec.TargetPorts) != 1 || pool.Spec.TargetPorts[0].Number != containerPort(warden, "frontend") {
		t.Errorf("the pool's targetPorts %v, the wardens' frontend is %d", pool.Spec.TargetPorts, containerPort(warden, "frontend"))
	}

	refs := route.Spec.Rules[0].BackendRefs
	if len(refs) != 1 || refs[0].Group == nil || string(*refs[0].Group) != strings.Split(InferencePoolGroupVersion, "/")[0] ||
		refs[0].Kind == nil || *refs[0].Kind != "InferencePool" || string(refs[0].Name) != pool.Name {
		t.Errorf("the HTTPRoute's backendRefs %+v do not name the InferencePool %s", refs, pool.Name)
	}
}
