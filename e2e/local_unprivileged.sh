#!/usr/bin/env bash
# `lockstep local` run by an unprivileged user: pods still get their own /etc/hosts (through a
# user namespace) in which a Service name resolves to the pod behind it, and `down` leaves no
# pod process behind. Needs root to switch to the `nobody` user; skipped otherwise, and where
# the kernel refuses user namespaces.
# Usage: local_unprivileged.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
  echo "needs root and setpriv to act as another user: skipping"
  exit 77
fi
if ! setpriv --reuid=65534 --regid=65534 --clear-groups unshare --user --mount true 2>/dev/null; then
  echo "user namespaces are not allowed here: skipping"
  exit 77
fi
source "$(dirname "$0")/lib.sh"
export KUBECONFIG=$LOCKSTEP_HOME/kubeconfig
chown 65534:65534 "$LOCKSTEP_HOME"
chmod 755 "$LOCKSTEP_HOME"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env LOCKSTEP_HOME="$LOCKSTEP_HOME" "$@"; }
# The binary must be reachable by nobody (build trees under /root are not): copy it.
cp "$lockstep" "$work/lockstep" && chmod 755 "$work" "$work/lockstep"
lockstep=$work/lockstep
cleanup() { as_nobody "$lockstep" local down >/dev/null 2>&1 || true; rm -rf "$LOCKSTEP_HOME" "$work"; }

as_nobody "$lockstep" local up
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: peer}
spec: {clusterIP: None, selector: {app: resolver}, ports: [{port: 2222}]}
---
apiVersion: v1
kind: Pod
metadata: {name: resolver, labels: {app: resolver}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: debian
    command: [sh, -c, 'echo "pid $$$$ uid $(id -u)"; getent hosts peer.default.svc; exec sleep 300']
YAML
kubectl wait --for=jsonpath='{.status.phase}'=Running pod/resolver --timeout=60s >/dev/null
ip=$(kubectl get pod resolver -o 'jsonpath={.status.podIP}')
for _ in $(seq 100); do
  log=$(kubectl logs resolver 2>/dev/null || true)
  [[ $log == *peer.default.svc* ]] && break
  sleep 0.1
done
[[ $log == *"uid 65534"* ]] || fail "the pod does not run as the unprivileged user: $log"
[[ $log == *"$ip"*peer.default.svc* ]] || fail "peer.default.svc does not resolve to $ip: $log"
pid=$(sed -n 's/^pid \([0-9]*\).*/\1/p' <<<"$log")
kill -0 "$pid" 2>/dev/null || fail "pod process $pid is not running"
as_nobody "$lockstep" local down
kill -0 "$pid" 2>/dev/null && fail "pod process $pid outlived lockstep local down"
echo "PASS"
