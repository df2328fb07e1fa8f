#!/usr/bin/env bash
# `lockstep local` driven by the official Kubernetes Python client (Debian's python3-kubernetes):
# local_python_client.py lists, watches, creates, patches and scales a TrainingJob and reads
# its pods, logs and events, through the client's typed models. Skipped (77) without the client.
# Usage: local_python_client.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
if ! /usr/bin/python3 -c 'import kubernetes' 2>/dev/null; then
  echo "python3-kubernetes not installed: skipping"
  exit 77
fi
source "$(dirname "$0")/lib.sh"

"$lockstep" local up
/usr/bin/python3 "$src/e2e/local_python_client.py" "$LOCKSTEP_HOME/kubeconfig" || {
  echo "--- pods" >&2
  k get pods -o wide >&2 || true
  echo "--- trainingjobs" >&2
  k get tj -o yaml >&2 || true
  exit 1
}
