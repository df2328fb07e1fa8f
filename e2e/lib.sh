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
