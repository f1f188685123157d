// Package helm tests the gpufleet Helm chart (gpufleet/): it renders the
// chart with Helm's own engine, decodes every manifest strictly into the
// Kubernetes API types, so that a misspelt field fails, and checks what the
// objects must agree on: the selectors, the ports, the store's volume and
// that every flag the chart gives gpufleet is one of its flags. It is a
// module of its own so that the main module does not depend on Helm and
// Kubernetes.
package helm

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "gpufleet"

// release and namespace name the fake release the chart is rendered for.
const (
	release   = "fleet"
	namespace = "gpu-system"
)

// newObject gives the typed object for an apiVersion and kind: every kind
// the chart may render. Any other fails the test.
var newObject = map[string]func() any{
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"apps/v1/DaemonSet":                       func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"v1/PersistentVolumeClaim":                func() any { return &corev1.PersistentVolumeClaim{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

// manifest is one rendered and decoded object.
type manifest struct {
	source string // the template it came from
	kind   string // apiVersion/kind
	obj    any    // the typed object
}

// capabilities is a cluster with the Prometheus Operator's CRDs.
func capabilities(t *testing.T) *common.Capabilities {
	t.Helper()
	caps := common.DefaultCapabilities.Copy()
	kv, err := common.ParseKubeVersion("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	caps.KubeVersion = *kv
	caps.APIVersions = append(slices.Clone(caps.APIVersions), "monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor")
	return caps
}

// render renders the chart with vals over its values.yaml, as `helm
// template` does, in strict mode (a template reading a value values.yaml
// lacks fails).
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	rv, err := util.ToRenderValues(chrt, vals, common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, capabilities(t))
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Engine{Strict: true}.RenderWithContext(t.Context(), chrt, rv)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return out, nil
}

// docSep separates the YAML documents of one file.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeAll splits the rendered files into documents and decodes each
// strictly into its type.
func decodeAll(rendered map[string]string) ([]manifest, error) {
	var out []manifest
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range rendered {
			if !yield(k) {
				return
			}
		}
	}) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range docSep.Split(rendered[name], -1) {
			if isEmpty(doc) {
				continue
			}
			m, err := decodeStrict([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			m.source = name
			out = append(out, m)
		}
	}
	return out, nil
}

// isEmpty reports whether a document holds only comments and blank lines.
func isEmpty(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			return false
		}
	}
	return true
}

// decodeStrict decodes one manifest into the type its apiVersion and kind
// name: an unknown field, a field given twice or a value of the wrong type
// is an error, and so is a kind the chart is not expected to render.
func decodeStrict(doc []byte) (manifest, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return manifest{}, fmt.Errorf("read apiVersion and kind: %w", err)
	}
	kind := head.APIVersion + "/" + head.Kind
	mk, ok := newObject[kind]
	if !ok {
		return manifest{}, fmt.Errorf("unexpected kind %q", kind)
	}
	obj := mk()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", kind, err)
	}
	return manifest{kind: kind, obj: obj}, nil
}

// objects is a release's decoded manifests by type.
type objects struct {
	statefulSets    []*appsv1.StatefulSet
	daemonSets      []*appsv1.DaemonSet
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	secrets         []*corev1.Secret
	pvcs            []*corev1.PersistentVolumeClaim
	serviceMonitors []*monitoringv1.ServiceMonitor
}

func sortObjects(ms []manifest) objects {
	var o objects
	for _, m := range ms {
		switch v := m.obj.(type) {
		case *appsv1.StatefulSet:
			o.statefulSets = append(o.statefulSets, v)
		case *appsv1.DaemonSet:
			o.daemonSets = append(o.daemonSets, v)
		case *appsv1.Deployment:
			o.deployments = append(o.deployments, v)
		case *corev1.Service:
			o.services = append(o.services, v)
		case *corev1.Secret:
			o.secrets = append(o.secrets, v)
		case *corev1.PersistentVolumeClaim:
			o.pvcs = append(o.pvcs, v)
		case *monitoringv1.ServiceMonitor:
			o.serviceMonitors = append(o.serviceMonitors, v)
		}
	}
	return o
}

// TestChart renders the chart for each set of values, decodes every
// manifest strictly and checks the objects.
func TestChart(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		// what the objects must be
		replicas       int32
		postgres       bool
		agent          bool
		serviceMonitor int    // ServiceMonitors
		engineSocket   string // the host socket the agent must mount
		tls            bool
	}{
		{name: "defaults (SQLite)", replicas: 1, agent: true},
		{
			name:     "postgres URL, 2 replicas",
			vals:     map[string]any{"server": map[string]any{"replicas": 2, "postgres": map[string]any{"url": "postgres://gpufleet:secret@db:5432/gpufleet"}}},
			replicas: 2, postgres: true, agent: true,
		},
		{
			name: "postgres secret, 3 replicas, TLS, flags, labels, existing tokens",
			vals: map[string]any{
				"tokens": map[string]any{"existingSecret": "my-tokens"},
				"server": map[string]any{
					"replicas":  3,
					"postgres":  map[string]any{"existingSecret": "db", "existingSecretKey": "dsn"},
					"tls":       map[string]any{"existingSecret": "gpufleet-tls"},
					"flags":     map[string]any{"policy": "fifo", "log-level": "debug", "heartbeat-grace": "45s"},
					"extraArgs": []any{"--spare=h100-sxm-80gb=8", "--default-isolation", "production=hard"},
				},
				"agent": map[string]any{
					"labels":    []any{"rack=r12", "block=b1"},
					"flags":     map[string]any{"bench": "off", "fence-grace": "20s"},
					"extraArgs": []any{"--run-as=team-a=alice"},
				},
			},
			replicas: 3, postgres: true, agent: true, tls: true,
		},
		{
			name: "serviceMonitor enabled",
			vals: map[string]any{
				"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
				"server":         map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
			},
			replicas: 1, agent: true, serviceMonitor: 2,
		},
		{
			name:     "container jobs through the node's engine socket",
			vals:     map[string]any{"agent": map[string]any{"engineSocket": "/run/podman/podman.sock", "engineRuntime": "podman"}},
			replicas: 1, agent: true, engineSocket: "/run/podman/podman.sock",
		},
		{
			name:     "agent disabled",
			vals:     map[string]any{"agent": map[string]any{"enabled": false}, "serviceMonitor": map[string]any{"enabled": true}},
			replicas: 1,
		},
		{
			name:     "sim backend, no persistence, join token",
			vals:     map[string]any{"tokens": map[string]any{"adminToken": "0123456789abcdef0123", "joinToken": "gpj_x"}, "server": map[string]any{"persistence": map[string]any{"enabled": false}}, "agent": map[string]any{"backend": "sim", "runtimeClassName": ""}},
			replicas: 1, agent: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rendered, err := render(t, tc.vals)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := decodeAll(rendered)
			if err != nil {
				t.Fatal(err)
			}
			o := sortObjects(ms)
			if len(o.deployments) != 0 || len(o.pvcs) != 0 {
				t.Errorf("the chart renders %d Deployments and %d PersistentVolumeClaims; the server is a StatefulSet with its own claims", len(o.deployments), len(o.pvcs))
			}
			checkSecretRefs(t, o)
			sts := checkServer(t, o, tc.replicas, tc.postgres, tc.tls)
			if tc.agent {
				checkAgent(t, o, sts, tc.tls)
				checkEngineSocket(t, o, tc.engineSocket)
			} else if len(o.daemonSets) != 0 {
				t.Errorf("agent disabled, yet %d DaemonSets", len(o.daemonSets))
			}
			if len(o.serviceMonitors) != tc.serviceMonitor {
				t.Errorf("%d ServiceMonitors, want %d", len(o.serviceMonitors), tc.serviceMonitor)
			}
			for _, sm := range o.serviceMonitors {
				checkServiceMonitor(t, o, sm)
			}
			if notes := rendered[chartDir+"/templates/NOTES.txt"]; !strings.Contains(notes, "port-forward") {
				t.Errorf("NOTES.txt: %q", notes)
			}
			for _, c := range containers(o) {
				if err := checkFlags(t, c); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestChartRefuses: values the chart must refuse at render time.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"SQLite with 2 replicas", map[string]any{"server": map[string]any{"replicas": 2}}, "needs PostgreSQL"},
		{"short admin token", map[string]any{"tokens": map[string]any{"adminToken": "short"}}, "at least 16"},
		{"server ServiceMonitor without a metrics port", map[string]any{"server": map[string]any{"metricsPort": 0, "serviceMonitor": map[string]any{"enabled": true}}}, "needs server.metricsPort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestFlagCheckCatchesMisspeltFlag: a flag gpufleet does not have, given
// through the chart's values, fails the flag check.
func TestFlagCheckCatchesMisspeltFlag(t *testing.T) {
	for _, vals := range []map[string]any{
		{"agent": map[string]any{"flags": map[string]any{"metrics-lisen": ":9400"}}},
		{"server": map[string]any{"extraArgs": []any{"--heartbeat-grase=1m"}}},
	} {
		rendered, err := render(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := decodeAll(rendered)
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		for _, c := range containers(sortObjects(ms)) {
			if err := checkFlags(t, c); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) != 1 {
			t.Errorf("values %v: flag check errors %v, want one", vals, errs)
		}
	}
}

// TestStrictDecoding: the decoder the chart test uses refuses a misspelt
// field, a field of the wrong type and an unknown kind, and takes the same
// manifest spelt right.
func TestStrictDecoding(t *testing.T) {
	const good = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: x
spec:
  selector:
    matchLabels: {app: x}
  template:
    metadata:
      labels: {app: x}
    spec:
      containers:
        - name: x
          image: x
          ports:
            - name: metrics
              containerPort: 9400
`
	if _, err := decodeStrict([]byte(good)); err != nil {
		t.Fatalf("the correct manifest: %v", err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelt field", "containerPort: 9400", "containerPrt: 9400"},
		{"misspelt top-level field", "metadata:\n  name: x", "metdata:\n  name: x"},
		{"wrong type", "containerPort: 9400", "containerPort: [9400]"},
		{"field twice", "image: x", "image: x\n          image: y"},
		{"unknown kind", "kind: DaemonSet", "kind: DaemonSett"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.from, tc.to, 1)
			if bad == good {
				t.Fatalf("%q not in the manifest", tc.from)
			}
			if _, err := decodeStrict([]byte(bad)); err == nil {
				t.Errorf("decoded:\n%s", bad)
			}
		})
	}
}

// TestLint runs Helm's chart linter (helm lint) on the defaults and on the
// HA values.
func TestLint(t *testing.T) {
	kv, err := common.ParseKubeVersion("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, vals := range []map[string]any{nil, {"server": map[string]any{"replicas": 2, "postgres": map[string]any{"url": "postgres://db/gpufleet"}}}} {
		res := lint.RunAll(chartDir, vals, namespace, lint.WithKubeVersion(kv))
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint %v: %s", vals, m)
			} else {
				t.Logf("helm lint: %s", m)
			}
		}
	}
}

// checkServer checks the server's StatefulSet and Services, and returns the
// StatefulSet.
func checkServer(t *testing.T, o objects, replicas int32, postgres, tls bool) *appsv1.StatefulSet {
	t.Helper()
	if len(o.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want the server's", len(o.statefulSets))
	}
	sts := o.statefulSets[0]
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != replicas {
		t.Errorf("server replicas %v, want %d", sts.Spec.Replicas, replicas)
	}
	checkSelector(t, "server StatefulSet", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("server containers %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "server" {
		t.Errorf("server args %q", c.Args)
	}

	// The store: SQLite on the StatefulSet's own claim, or PostgreSQL.
	hasDB := envVar(c, "GPUFLEET_DB") != nil
	claims := len(sts.Spec.VolumeClaimTemplates)
	if postgres && (!hasDB || claims != 0) {
		t.Errorf("PostgreSQL: GPUFLEET_DB set %v, %d volume claim templates; want set and none", hasDB, claims)
	}
	persistent := !postgres && volume(pod, "data") == nil
	if !postgres && (hasDB || (persistent && claims != 1)) {
		t.Errorf("SQLite: GPUFLEET_DB set %v, %d volume claim templates; want unset and one", hasDB, claims)
	}
	if claims == 1 && sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("volume claim template %q, want data", sts.Spec.VolumeClaimTemplates[0].Name)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "data" && m.MountPath == envValue(c, "GPUFLEET_DATA_DIR")
	}) {
		t.Errorf("GPUFLEET_DATA_DIR %q is not the data volume's mount", envValue(c, "GPUFLEET_DATA_DIR"))
	}
	if claims == 0 && volume(pod, "data") == nil {
		t.Error("no data volume")
	}

	// Security: non-root, read-only root file system.
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("server security: pod %+v, container %+v", psc, sc)
	}
	if envVar(c, "GPUFLEET_ADMIN_TOKEN") == nil || envVar(c, "GPUFLEET_ADMIN_TOKEN").ValueFrom == nil {
		t.Error("the admin token does not come from a Secret")
	}

	// Probes on the health endpoints, on the API port.
	http := containerPort(c.Ports, "http")
	if http == nil || fmt.Sprint(":", http.ContainerPort) != envValue(c, "GPUFLEET_LISTEN") {
		t.Errorf("http port %+v, GPUFLEET_LISTEN %q", http, envValue(c, "GPUFLEET_LISTEN"))
	}
	scheme := corev1.URISchemeHTTP
	if tls {
		scheme = corev1.URISchemeHTTPS
		if envValue(c, "GPUFLEET_TLS_CERT") == "" || envValue(c, "GPUFLEET_TLS_KEY") == "" {
			t.Error("TLS: no --tls-cert or --tls-key")
		}
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" || p.probe.HTTPGet.Scheme != scheme {
			t.Errorf("probe %s: %+v", p.path, p.probe)
		}
	}

	// The API Service and the headless one the StatefulSet names.
	api := service(o, sts.Name)
	if api == nil || servicePort(api, "http") == nil {
		t.Fatalf("no Service %s with port http", sts.Name)
	}
	checkSelects(t, api, sts.Spec.Template)
	headless := service(o, sts.Spec.ServiceName)
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("StatefulSet serviceName %q: no headless Service", sts.Spec.ServiceName)
	}
	checkSelects(t, headless, sts.Spec.Template)
	for _, ds := range o.daemonSets {
		for _, s := range []*corev1.Service{api, headless} {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("Service %s selects the agents' pods", s.Name)
			}
		}
	}
	if metrics := containerPort(c.Ports, "metrics"); metrics != nil && servicePort(api, "metrics") == nil {
		t.Error("the server's metrics port is not on its Service")
	}
	return sts
}

// checkAgent checks the agents' DaemonSet and metrics Service.
func checkAgent(t *testing.T, o objects, sts *appsv1.StatefulSet, tls bool) {
	t.Helper()
	if len(o.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the agent's", len(o.daemonSets))
	}
	ds := o.daemonSets[0]
	checkSelector(t, "agent DaemonSet", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Errorf("agent args %q", c.Args)
	}
	metrics := containerPort(c.Ports, "metrics")
	if metrics == nil || metrics.ContainerPort != 9400 || envValue(c, "GPUFLEET_METRICS_LISTEN") != ":9400" {
		t.Errorf("agent metrics port %+v, GPUFLEET_METRICS_LISTEN %q: want 9400 named metrics", metrics, envValue(c, "GPUFLEET_METRICS_LISTEN"))
	}
	// Probes on the agent's health endpoints, on the metrics listener.
	for _, p := range []struct {
		name   string
		probe  *corev1.Probe
		path   string
		period int32
	}{{"liveness", c.LivenessProbe, "/healthz", 10}, {"readiness", c.ReadinessProbe, "/readyz", 5}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" ||
			p.probe.HTTPGet.Scheme != "" && p.probe.HTTPGet.Scheme != corev1.URISchemeHTTP || p.probe.PeriodSeconds != p.period {
			t.Errorf("agent %s probe %+v: want GET %s on port metrics every %ds", p.name, p.probe, p.path, p.period)
		}
	}
	if lp := c.LivenessProbe; lp != nil && lp.FailureThreshold != 6 {
		t.Errorf("agent liveness failureThreshold %d, want 6", lp.FailureThreshold)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("agent nodeSelector %v", pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == "nvidia.com/gpu" }) {
		t.Errorf("agent tolerations %v", pod.Tolerations)
	}
	if envValue(c, "GPUFLEET_BACKEND") == "nvml" && (pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia") {
		t.Errorf("nvml backend with runtimeClassName %v, want nvidia", pod.RuntimeClassName)
	}
	if envValue(c, "NVIDIA_VISIBLE_DEVICES") != "all" || envValue(c, "NVIDIA_DRIVER_CAPABILITIES") != "utility,compute" {
		t.Error("NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES not set for the NVIDIA container runtime")
	}
	// The node's name from the downward API.
	node := envVar(c, "NODE_NAME")
	if node == nil || node.ValueFrom == nil || node.ValueFrom.FieldRef == nil || node.ValueFrom.FieldRef.FieldPath != "spec.nodeName" || envValue(c, "GPUFLEET_NAME") != "$(NODE_NAME)" {
		t.Errorf("GPUFLEET_NAME is not the node's name: %+v, %q", node, envValue(c, "GPUFLEET_NAME"))
	}
	if jt := envVar(c, "GPUFLEET_JOIN_TOKEN"); jt == nil || jt.ValueFrom == nil || jt.ValueFrom.SecretKeyRef == nil {
		t.Error("the join token does not come from a Secret")
	}
	if v := volume(pod, "data"); v == nil || v.HostPath == nil || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "data" && m.MountPath == envValue(c, "GPUFLEET_DATA_DIR")
	}) {
		t.Error("the agent's data directory is not the node's (hostPath)")
	}

	// The servers: each replica by its name under the headless Service, in order.
	headless := service(o, sts.Spec.ServiceName)
	urls := strings.Split(envValue(c, "GPUFLEET_SERVER"), ",")
	if len(urls) != int(*sts.Spec.Replicas) {
		t.Errorf("GPUFLEET_SERVER %q: want %d replicas", urls, *sts.Spec.Replicas)
	}
	for i, s := range urls {
		u, err := url.Parse(s)
		wantScheme := "http"
		if tls {
			wantScheme = "https"
		}
		want := fmt.Sprintf("%s-%d.%s.%s.svc", sts.Name, i, headless.Name, namespace)
		if err != nil || u.Scheme != wantScheme || u.Hostname() != want || u.Port() != fmt.Sprint(servicePort(headless, "http").Port) {
			t.Errorf("GPUFLEET_SERVER[%d] = %q, want %s://%s:PORT", i, s, wantScheme, want)
		}
	}

	// The headless metrics Service selects exactly the agents' pods.
	var svc *corev1.Service
	for _, s := range o.services {
		if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
			if svc != nil {
				t.Errorf("Services %s and %s both select the agents", svc.Name, s.Name)
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no Service selects the agents' pods")
	}
	checkSelects(t, svc, ds.Spec.Template)
	sp := servicePort(svc, "metrics")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sp == nil || sp.Port != 9400 || sp.TargetPort.String() != "metrics" {
		t.Errorf("agent Service %s: clusterIP %q, metrics port %+v; want headless, 9400 to the port named metrics", svc.Name, svc.Spec.ClusterIP, sp)
	}
}

// checkServiceMonitor checks that a ServiceMonitor selects one Service of the
// release, in its namespace, and scrapes a port that Service has.
func checkServiceMonitor(t *testing.T, o objects, sm *monitoringv1.ServiceMonitor) {
	t.Helper()
	sel, err := metav1LabelSelector(sm)
	if err != nil {
		t.Fatalf("ServiceMonitor %s: %v", sm.Name, err)
	}
	var matched []*corev1.Service
	for _, s := range o.services {
		if sel.Matches(labels.Set(s.Labels)) {
			matched = append(matched, s)
		}
	}
	if len(matched) != 1 {
		t.Fatalf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(matched))
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor %s namespaces %v", sm.Name, sm.Spec.NamespaceSelector.MatchNames)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("ServiceMonitor %s: no endpoints", sm.Name)
	}
	for _, ep := range sm.Spec.Endpoints {
		if servicePort(matched[0], ep.Port) == nil || ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor %s scrapes port %q path %q; Service %s has no such port", sm.Name, ep.Port, ep.Path, matched[0].Name)
		}
	}
}

// metav1LabelSelector turns a ServiceMonitor's selector into a selector.
func metav1LabelSelector(sm *monitoringv1.ServiceMonitor) (labels.Selector, error) {
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		return nil, fmt.Errorf("selects every Service")
	}
	return labels.SelectorFromSet(sm.Spec.Selector.MatchLabels), nil
}

// checkSecretRefs checks that every Secret a container reads is one the
// chart renders with that key, or one the values name as existing.
func checkSecretRefs(t *testing.T, o objects) {
	t.Helper()
	rendered := map[string]*corev1.Secret{}
	for _, s := range o.secrets {
		rendered[s.Name] = s
	}
	for _, c := range containers(o) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			s, ok := rendered[ref.Name]
			switch {
			case !ok && strings.HasPrefix(ref.Name, release+"-"):
				t.Errorf("%s reads Secret %s, which the chart does not render", e.Name, ref.Name)
			case ok && ref.Key == "join-token":
				// Set after the first install when not given (NOTES.txt).
			case ok && s.Data[ref.Key] == nil:
				t.Errorf("%s reads key %s of Secret %s, which has none", e.Name, ref.Key, ref.Name)
			}
		}
	}
	for _, s := range o.secrets {
		if strings.HasSuffix(s.Name, "-tokens") && len(s.Data["admin-token"]) < 16 {
			t.Errorf("Secret %s: admin-token %q", s.Name, s.Data["admin-token"])
		}
	}
}

// checkSelector checks that a workload's selector selects its own pods.
func checkSelector(t *testing.T, what string, sel, podLabels map[string]string) {
	t.Helper()
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select its pods' labels %v", what, sel, podLabels)
	}
}

// checkSelects checks that a Service selects the pods of tmpl and that each
// of its ports targets a port their container has by name.
func checkSelects(t *testing.T, s *corev1.Service, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	checkSelector(t, "Service "+s.Name, s.Spec.Selector, tmpl.Labels)
	for _, p := range s.Spec.Ports {
		if name := p.TargetPort.String(); containerPort(tmpl.Spec.Containers[0].Ports, name) == nil {
			t.Errorf("Service %s port %s targets %q, which its pods' container does not name", s.Name, p.Name, name)
		}
	}
}

// containers lists the release's containers.
func containers(o objects) []corev1.Container {
	var cs []corev1.Container
	for _, s := range o.statefulSets {
		cs = append(cs, s.Spec.Template.Spec.Containers...)
	}
	for _, d := range o.daemonSets {
		cs = append(cs, d.Spec.Template.Spec.Containers...)
	}
	for _, d := range o.deployments {
		cs = append(cs, d.Spec.Template.Spec.Containers...)
	}
	return cs
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envValue(c corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

func volume(pod corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func service(o objects, name string) *corev1.Service {
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// containerPort is a container's port by name.
func containerPort(ports []corev1.ContainerPort, name string) *corev1.ContainerPort {
	for i := range ports {
		if ports[i].Name == name {
			return &ports[i]
		}
	}
	return nil
}

// servicePort is a Service's port by name.
func servicePort(s *corev1.Service, name string) *corev1.ServicePort {
	for i := range s.Spec.Ports {
		if s.Spec.Ports[i].Name == name {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

// helpFlag is a flag's name in cobra's help: "  -o, --output string".
var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)`)

// gpufleetFlags builds gpufleet once and gives each subcommand's flags, as
// its --help lists them (the global ones included).
var gpufleetFlags = sync.OnceValues(func() (map[string]map[string]bool, error) {
	dir, err := os.MkdirTemp("", "gpufleet-chart-test")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "gpufleet")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpufleet")
	build.Dir = filepath.Join("..", "..")
	// (go-nvml's header marks some calls deprecated; cgo would print that.)
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/gpufleet: %w\n%s", err, out)
	}
	flags := map[string]map[string]bool{}
	for _, sub := range []string{"server", "agent"} {
		var out bytes.Buffer
		cmd := exec.Command(bin, sub, "--help")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("gpufleet %s --help: %w\n%s", sub, err, out.String())
		}
		flags[sub] = map[string]bool{}
		for _, m := range helpFlag.FindAllStringSubmatch(out.String(), -1) {
			flags[sub][m[1]] = true
		}
		if !flags[sub]["data-dir"] || !flags[sub]["server"] {
			return nil, fmt.Errorf("gpufleet %s --help: no --data-dir or --server among %v", sub, flags[sub])
		}
	}
	return flags, nil
})

// checkFlags checks that every flag a container gives gpufleet, as an
// argument (--flag, --flag=value) or as GPUFLEET_<FLAG>, is a flag of the
// subcommand it runs (its first argument), and that no variable is set twice.
func checkFlags(t *testing.T, c corev1.Container) error {
	t.Helper()
	all, err := gpufleetFlags()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Args) == 0 {
		return fmt.Errorf("container %s: no subcommand in args", c.Name)
	}
	sub := c.Args[0]
	known, ok := all[sub]
	if !ok {
		return fmt.Errorf("container %s runs gpufleet %s, which the test does not know", c.Name, sub)
	}
	var bad []string
	for _, a := range c.Args[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !known[name] {
				bad = append(bad, a)
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			bad = append(bad, e.Name+" (set twice)")
		}
		seen[e.Name] = true
		if name, ok := strings.CutPrefix(e.Name, "GPUFLEET_"); ok {
			if flag := strings.ReplaceAll(strings.ToLower(name), "_", "-"); !known[flag] {
				bad = append(bad, e.Name)
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("container %s: not flags of gpufleet %s: %s", c.Name, sub, strings.Join(bad, ", "))
	}
	return nil
}

// checkEngineSocket: with agent.engineSocket the agent mounts the node's
// engine socket (a hostPath of type Socket) where GPUFLEET_ENGINE_SOCKET
// says, runs --runtime engineRuntime, and sees the node's CDI specs
// read-only; without it, none of that.
func checkEngineSocket(t *testing.T, o objects, socket string) {
	t.Helper()
	pod := o.daemonSets[0].Spec.Template.Spec
	c := pod.Containers[0]
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "engine-socket" {
			vol = &pod.Volumes[i]
		}
	}
	if socket == "" {
		if vol != nil || envValue(c, "GPUFLEET_ENGINE_SOCKET") != "" {
			t.Error("an engine socket without agent.engineSocket")
		}
		return
	}
	if vol == nil || vol.HostPath == nil || vol.HostPath.Path != socket || vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathSocket {
		t.Fatalf("engine socket volume %+v, want hostPath %s of type Socket", vol, socket)
	}
	mounted := ""
	for _, m := range c.VolumeMounts {
		if m.Name == "engine-socket" {
			mounted = m.MountPath
		}
		if strings.HasPrefix(m.Name, "cdi-") && !m.ReadOnly {
			t.Errorf("CDI specs mounted writable: %+v", m)
		}
	}
	if mounted == "" || envValue(c, "GPUFLEET_ENGINE_SOCKET") != mounted || envValue(c, "GPUFLEET_RUNTIME") != "podman" {
		t.Errorf("socket mounted at %q, GPUFLEET_ENGINE_SOCKET %q, GPUFLEET_RUNTIME %q", mounted, envValue(c, "GPUFLEET_ENGINE_SOCKET"), envValue(c, "GPUFLEET_RUNTIME"))
	}
}
