// lockstep-chart-render renders a Helm chart as `helm template` does, with the engine Helm itself
// uses: Go's text/template and the sprig function library, plus the Helm built-ins a chart
// commonly needs (include, tpl, toYaml, fromYaml, toJson, fromJson, required, fail, lookup;
// .Values, .Release, .Chart, .Capabilities, .Template, .Files.Get). Values are the chart's values.yaml
// deep-merged with each --values file in order (a null removes a key, as in Helm), then
// validated against values.schema.json. Output: every rendered manifest, each headed by a
// "# Source:" comment, in Helm's install order of kinds; --include-crds puts the chart's crds/
// first; --notes prints the rendered NOTES.txt instead.
//
// .Capabilities is what a cluster of --kube-version would report to `helm install`: the
// built-in group/versions (and group/version/Kinds) that version serves, from the table in
// capabilities.go, plus each --api-versions. A version outside Chart.yaml's kubeVersion range
// is refused, as Helm refuses it.
//
// Errors (a bad values file, a schema violation, a template error, `required` or `fail`, a
// Kubernetes version the chart does not support) go to stderr naming the file and the value,
// and the exit status is 1; usage errors (a bad flag, --kube-version or --api-versions) exit 2.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
	"github.com/xeipuuv/gojsonschema"
)

// A repeatable flag.
type stringList []string

func (v *stringList) String() string     { return strings.Join(*v, ",") }
func (v *stringList) Set(s string) error { *v = append(*v, s); return nil }

// The order in which Helm installs kinds (pkg/releaseutil.InstallOrder); others go last.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

func main() {
	var files, extraAPIs stringList
	release := flag.String("name", "lockstep", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	includeCRDs := flag.Bool("include-crds", false, "put the chart's crds/ first")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	kubeVersion := flag.String("kube-version", "v1.30.0", "the cluster's Kubernetes version: .Capabilities.KubeVersion, and the built-in APIs in .Capabilities.APIVersions")
	flag.Var(&extraAPIs, "api-versions", "a group/version or group/version/Kind the cluster serves besides the built-in ones, such as a CRD's (repeatable, or comma-separated)")
	flag.Var(&extraAPIs, "a", "shorthand for --api-versions")
	flag.Var(&files, "values", "a values file merged over values.yaml (repeatable)")
	flag.Var(&files, "f", "shorthand for --values")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: lockstep-chart-render [--name R] [--namespace NS] [--kube-version V] [--api-versions G/V]... [-f values.yaml]... [--include-crds] [--notes] CHART_DIR\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	caps, err := newCapabilities(*kubeVersion, extraAPIs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockstep-chart-render: %v\n", err)
		os.Exit(2)
	}
	out, err := render(flag.Arg(0), *release, *namespace, caps, files, *includeCRDs, *notes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockstep-chart-render: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

func readYAMLMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m, nil
}

// mergeValues merges src over dst as Helm does: maps merge key by key, anything else replaces,
// and a null in src deletes the key.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

func validate(chartDir string, values map[string]interface{}) error {
	schemaFile := filepath.Join(chartDir, "values.schema.json")
	schema, err := os.ReadFile(schemaFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	doc, err := json.Marshal(values)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if result.Valid() {
		return nil
	}
	var b strings.Builder
	b.WriteString("values don't meet the specifications of the schema:")
	for _, e := range result.Errors() {
		fmt.Fprintf(&b, "\n- %s: %s", e.Field(), e.Description())
	}
	return errors.New(b.String())
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// chartFiles is Helm's .Files: the chart's files by path, for .Files.Get (the empty string for
// a file that is not there, as Helm).
type chartFiles struct{ dir string }

func (f chartFiles) Get(name string) string {
	data, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	if err != nil {
		return ""
	}
	return string(data)
}

func render(chartDir, release, namespace string, caps capabilities, files []string, includeCRDs, notesOnly bool) (string, error) {
	chartMeta, err := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	chart := map[string]interface{}{}
	for k, v := range chartMeta {
		// Helm exposes Chart.yaml's fields capitalised: .Chart.Name, .Chart.AppVersion.
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	chartName, _ := chart["Name"].(string)
	if chartName == "" {
		return "", fmt.Errorf("%s: no name", filepath.Join(chartDir, "Chart.yaml"))
	}
	if err := checkKubeVersion(chartDir, chartMeta["kubeVersion"], caps.KubeVersion); err != nil {
		return "", err
	}
	values, err := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		extra, err := readYAMLMap(f)
		if err != nil {
			return "", err
		}
		mergeValues(values, extra)
	}
	if err := validate(chartDir, values); err != nil {
		return "", err
	}

	top := map[string]interface{}{
		"Values": values,
		"Chart":  chart,
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": caps,
		"Files":        chartFiles{dir: chartDir},
	}

	root := template.New("gotpl").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // as Helm: a chart must not read the renderer's environment
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: nested too deeply", name)
		}
		includeDepth++
		defer func() { includeDepth-- }()
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // no cluster, as `helm template`
	}
	root.Funcs(funcs)

	templatesDir := filepath.Join(chartDir, "templates")
	var names []string
	err = filepath.Walk(templatesDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		name := path.Join(chartName, filepath.ToSlash(rel))
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)

	execute := func(name string) (string, error) {
		scope := map[string]interface{}{}
		for k, v := range top {
			scope[k] = v
		}
		scope["Template"] = map[string]interface{}{"Name": name, "BasePath": path.Join(chartName, "templates")}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, scope); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}

	if notesOnly {
		for _, n := range names {
			if path.Base(n) == "NOTES.txt" {
				return execute(n)
			}
		}
		return "", fmt.Errorf("%s has no templates/NOTES.txt", chartDir)
	}

	type manifest struct {
		source, kind, body string
		order              int
	}
	rank := func(kind string) int {
		for i, k := range installOrder {
			if k == kind {
				return i
			}
		}
		return len(installOrder)
	}
	var manifests []manifest
	for _, n := range names {
		base := path.Base(n)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		text, err := execute(n)
		if err != nil {
			return "", err
		}
		for _, doc := range splitDocuments(text) {
			var head struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return "", fmt.Errorf("%s renders invalid YAML: %v\n%s", n, err, doc)
			}
			if head.Kind == "" {
				return "", fmt.Errorf("%s renders a document without a kind:\n%s", n, doc)
			}
			manifests = append(manifests, manifest{n, head.Kind, doc, rank(head.Kind)})
		}
	}
	sort.SliceStable(manifests, func(i, j int) bool { return manifests[i].order < manifests[j].order })

	var out strings.Builder
	if includeCRDs {
		crds, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
		sort.Strings(crds)
		for _, c := range crds {
			data, err := os.ReadFile(c)
			if err != nil {
				return "", err
			}
			rel, _ := filepath.Rel(chartDir, c)
			fmt.Fprintf(&out, "---\n# Source: %s\n%s", path.Join(chartName, filepath.ToSlash(rel)), strings.TrimPrefix(string(data), "---\n"))
			if !strings.HasSuffix(out.String(), "\n") {
				out.WriteString("\n")
			}
		}
	}
	for _, m := range manifests {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", m.source, m.body)
	}
	return out.String(), nil
}

// splitDocuments cuts a rendered file at its "---" lines and drops documents that hold only
// whitespace and comments.
func splitDocuments(text string) []string {
	var docs []string
	var cur []string
	flush := func() {
		doc := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		meaningful := false
		for _, line := range strings.Split(doc, "\n") {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "#") {
				meaningful = true
				break
			}
		}
		if meaningful {
			docs = append(docs, doc)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}
