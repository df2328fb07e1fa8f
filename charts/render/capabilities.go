package main

// .Capabilities as a cluster's discovery would fill it for the Kubernetes version given with
// --kube-version: the built-in group/versions that version serves, each also as
// "group/version/Kind" for its kinds (as `helm install` reads them from the API server), plus
// whatever --api-versions adds (a CRD's group, for instance). Also the check of Chart.yaml's
// kubeVersion against that version, with Helm's message.

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/Masterminds/sprig"
)

// builtinAPI: kinds served at groupVersion by Kubernetes 1.since through 1.until (0: still
// served). The removals, and when each replacement arrived, are from the Kubernetes Deprecated
// API Migration Guide, up to its latest, v1.32; the few arrivals it does not give (the betas
// of IngressClass in 1.18, EndpointSlice in 1.17 and CSIStorageCapacity in 1.21, and
// ValidatingAdmissionPolicy's v1 in 1.30) are from those features' own pages. A row whose
// since is oldestMinor was served from 1.16 at the latest, often long before. Only these
// groups are described: a chart that asks for another (flowcontrol.apiserver.k8s.io,
// resource.k8s.io...) or for a CRD's group is told it is not served unless --api-versions
// names it. Subresources' kinds (Scale, Eviction, Binding) are left out.
type builtinAPI struct {
	groupVersion string
	since, until int
	kinds        []string
}

// The oldest Kubernetes minor version the table describes.
const oldestMinor = 16

var builtinAPIs = []builtinAPI{
	{"v1", 16, 0, []string{"ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
		"PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
		"ResourceQuota", "Secret", "Service", "ServiceAccount"}},
	{"apps/v1", 16, 0, []string{"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"}},
	{"batch/v1", 16, 0, []string{"Job"}},
	{"batch/v1", 21, 0, []string{"CronJob"}},
	{"batch/v1beta1", 16, 24, []string{"CronJob"}},
	{"autoscaling/v1", 16, 0, []string{"HorizontalPodAutoscaler"}},
	{"autoscaling/v2", 23, 0, []string{"HorizontalPodAutoscaler"}},
	{"autoscaling/v2beta1", 16, 24, []string{"HorizontalPodAutoscaler"}},
	{"autoscaling/v2beta2", 16, 25, []string{"HorizontalPodAutoscaler"}},
	{"policy/v1", 21, 0, []string{"PodDisruptionBudget"}},
	{"policy/v1beta1", 16, 24, []string{"PodDisruptionBudget", "PodSecurityPolicy"}},
	{"rbac.authorization.k8s.io/v1", 16, 0, []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}},
	{"rbac.authorization.k8s.io/v1beta1", 16, 21, []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}},
	{"coordination.k8s.io/v1", 16, 0, []string{"Lease"}},
	{"coordination.k8s.io/v1beta1", 16, 21, []string{"Lease"}},
	{"scheduling.k8s.io/v1", 16, 0, []string{"PriorityClass"}},
	{"scheduling.k8s.io/v1beta1", 16, 21, []string{"PriorityClass"}},
	{"networking.k8s.io/v1", 16, 0, []string{"NetworkPolicy"}},
	{"networking.k8s.io/v1", 19, 0, []string{"Ingress", "IngressClass"}},
	{"networking.k8s.io/v1beta1", 16, 21, []string{"Ingress"}},
	{"networking.k8s.io/v1beta1", 18, 21, []string{"IngressClass"}},
	{"extensions/v1beta1", 16, 21, []string{"Ingress"}},
	{"apiextensions.k8s.io/v1", 16, 0, []string{"CustomResourceDefinition"}},
	{"apiextensions.k8s.io/v1beta1", 16, 21, []string{"CustomResourceDefinition"}},
	{"admissionregistration.k8s.io/v1", 16, 0, []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}},
	{"admissionregistration.k8s.io/v1", 30, 0, []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}},
	{"admissionregistration.k8s.io/v1beta1", 16, 21, []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}},
	{"apiregistration.k8s.io/v1", 16, 0, []string{"APIService"}},
	{"apiregistration.k8s.io/v1beta1", 16, 21, []string{"APIService"}},
	{"certificates.k8s.io/v1", 19, 0, []string{"CertificateSigningRequest"}},
	{"certificates.k8s.io/v1beta1", 16, 21, []string{"CertificateSigningRequest"}},
	{"discovery.k8s.io/v1", 21, 0, []string{"EndpointSlice"}},
	{"discovery.k8s.io/v1beta1", 17, 24, []string{"EndpointSlice"}},
	{"events.k8s.io/v1", 19, 0, []string{"Event"}},
	{"events.k8s.io/v1beta1", 16, 24, []string{"Event"}},
	{"node.k8s.io/v1", 20, 0, []string{"RuntimeClass"}},
	{"node.k8s.io/v1beta1", 16, 24, []string{"RuntimeClass"}},
	{"storage.k8s.io/v1", 16, 0, []string{"StorageClass", "VolumeAttachment"}},
	{"storage.k8s.io/v1", 17, 0, []string{"CSINode"}},
	{"storage.k8s.io/v1", 19, 0, []string{"CSIDriver"}},
	{"storage.k8s.io/v1", 24, 0, []string{"CSIStorageCapacity"}},
	{"storage.k8s.io/v1beta1", 16, 21, []string{"CSIDriver", "CSINode", "StorageClass", "VolumeAttachment"}},
	{"storage.k8s.io/v1beta1", 21, 26, []string{"CSIStorageCapacity"}},
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions apiVersions
}

type kubeVersion struct{ Version, Major, Minor string }

// String and GitVersion as Helm's KubeVersion has them ({{ .Capabilities.KubeVersion }}, and
// the deprecated .Capabilities.KubeVersion.GitVersion many charts still compare).
func (k kubeVersion) String() string     { return k.Version }
func (k kubeVersion) GitVersion() string { return k.Version }

type apiVersions []string

// Has reports whether the cluster serves a group/version ("policy/v1") or a kind at one
// ("policy/v1/PodDisruptionBudget").
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

// A version as Masterminds/semver (Helm's parser) reads it loosely: "1.21", "v1.21.3",
// "v1.21.3-gke.100". The package itself is out of reach here: in GOPATH mode only code inside
// GOPATH may import it by its module path (.../semver/v3), so constraints are checked with
// sprig's semverCompare, which wraps it.
var versionRE = regexp.MustCompile(`^v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?` +
	`(-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$`)

var semverCompare = sprig.GenericFuncMap()["semverCompare"].(func(string, string) (bool, error))

// newCapabilities parses --kube-version as Helm does and lists what that version serves, plus
// `extra` (--api-versions, each possibly comma-separated as Helm's flag takes them). Errors are
// the caller's usage errors.
func newCapabilities(version string, extra []string) (capabilities, error) {
	var caps capabilities
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return caps, fmt.Errorf("--kube-version %q: not a Kubernetes version (for example v1.30.0)", version)
	}
	var n [3]uint64
	for i := range n {
		if m[i+1] == "" {
			continue
		}
		var err error
		if n[i], err = strconv.ParseUint(m[i+1], 10, 32); err != nil {
			return caps, fmt.Errorf("--kube-version %q: %v", version, err)
		}
	}
	if n[0] != 1 || n[1] < oldestMinor {
		return caps, fmt.Errorf("--kube-version %q: the renderer knows the APIs of Kubernetes 1.%d and newer", version, oldestMinor)
	}
	caps.KubeVersion = kubeVersion{
		Version: fmt.Sprintf("v%d.%d.%d%s%s", n[0], n[1], n[2], m[4], m[5]),
		Major:   strconv.FormatUint(n[0], 10),
		Minor:   strconv.FormatUint(n[1], 10),
	}
	minor := int(n[1])
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			caps.APIVersions = append(caps.APIVersions, s)
		}
	}
	for _, api := range builtinAPIs {
		if minor < api.since || (api.until != 0 && minor > api.until) {
			continue
		}
		add(api.groupVersion)
		for _, kind := range api.kinds {
			add(api.groupVersion + "/" + kind)
		}
	}
	for _, e := range extra {
		for _, s := range strings.Split(e, ",") {
			if err := checkAPIVersion(s); err != nil {
				return caps, fmt.Errorf("--api-versions %q: %v", s, err)
			}
			add(s)
		}
	}
	sort.Strings(caps.APIVersions)
	return caps, nil
}

// checkAPIVersion accepts "version", "group/version" and "group/version/Kind".
func checkAPIVersion(s string) error {
	parts := strings.Split(s, "/")
	if len(parts) > 3 {
		return errors.New("want group/version or group/version/Kind")
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " \t\n") {
			return errors.New("want group/version or group/version/Kind")
		}
	}
	return nil
}

// checkKubeVersion refuses a Kubernetes version outside Chart.yaml's kubeVersion range, in
// Helm's words.
func checkKubeVersion(chartDir string, constraint interface{}, kube kubeVersion) error {
	if constraint == nil {
		return nil
	}
	text, ok := constraint.(string)
	if !ok {
		return fmt.Errorf("%s/Chart.yaml: kubeVersion must be a string", chartDir)
	}
	ok, err := semverCompare(text, kube.Version)
	if err != nil {
		return fmt.Errorf("%s/Chart.yaml: kubeVersion %q: %v", chartDir, text, err)
	}
	if !ok {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", text, kube.Version)
	}
	return nil
}
