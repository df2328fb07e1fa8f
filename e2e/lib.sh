# Shared by the e2e scripts that drive `lockstep local`: sourced after setting `lockstep` (the
# binary) and `src` (the source tree).
# Skips (exit 77) without kubectl; gives each test its own state directory and a clean stop,
# and `k`, kubectl pointed at that cluster.
if ! command -v kubectl >/dev/null; then
  echo "kubectl not installed: skipping"
  exit 77
fi
export LOCKSTEP_HOME
LOCKSTEP_HOME=$(mktemp -d)
work=$(mktemp -d)
cleanup() { "$lockstep" local down >/dev/null 2>&1 || true; rm -rf "$LOCKSTEP_HOME" "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# kubectl against this test's local cluster, whatever the caller's KUBECONFIG says.
unset KUBECONFIG
k() { KUBECONFIG=$LOCKSTEP_HOME/kubeconfig kubectl "$@"; }
expect() {  # expect WANT COMMAND...: COMMAND's output must contain WANT
  local want=$1; shift
  local got
  got=$("$@" 2>&1) || true
  [[ $got == *"$want"* ]] || fail "$* -> '$got', want '$want'"
}

# descends_from PID ANCESTOR: whether ANCESTOR is PID or one of its parents.
descends_from() {
  local p=$1
  while [[ -n $p && $p -gt 1 ]]; do
    [[ $p == "$2" ]] && return 0
    p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null) || return 1
  done
  return 1
}

# pid_of JOB TYPE INDEX: the trainer process of that replica (found by its injected env), run
# by this test's cluster: another copy of this suite running beside it has jobs of the same
# names, whose processes are not ours to kill.
pid_of() {
  local p server env
  server=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$LOCKSTEP_HOME/server.json")
  [[ -n $server ]] || return 1
  for _ in $(seq 50); do  # a replica between two processes (a restart) has none for a moment
    for p in /proc/[0-9]*; do
      # Read whole, then matched: `tr | grep -q` under pipefail fails when grep quits early
      # and tr is killed writing the rest (SIGPIPE), which skipped the very process sought.
      env=$( { tr '\0' '\n' <"$p/environ"; } 2>/dev/null) || continue
      grep -qx "LOCKSTEP_JOB_NAME=$1" <<<"$env" || continue
      grep -qx "LOCKSTEP_REPLICA_TYPE=$2" <<<"$env" || continue
      grep -qx "LOCKSTEP_REPLICA_INDEX=$3" <<<"$env" || continue
      [[ $(readlink "$p/exe" 2>/dev/null) == *lockstep-trainer* ]] || continue
      descends_from "${p#/proc/}" "$server" || continue
      echo "${p#/proc/}"
      return 0
    done
    sleep 0.1
  done
  return 1
}

# await_lease_holder: waits (2 min at most) until the lockstep-operator Lease in namespace
# default has a holder; fails naming the operator's log (\$work/operator.log) otherwise.
await_lease_holder() {
  for _ in $(seq 1200); do
    [[ -n $(k get lease lockstep-operator -n default -o jsonpath='{.spec.holderIdentity}' 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  fail "no Lease holder: $(tail -5 "$work/operator.log" 2>/dev/null)"
}
