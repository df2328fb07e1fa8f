#!/usr/bin/env bash
# The main job: installs, builds, and runs an example TrainingJob on one machine through
# `lockstep local` (its API server, the TrainingJob controller in-process, and the process
# runner, which runs the lockstep/trainer image as the locally built lockstep-trainer) to
# Succeeded, with `lockstep run`.
#
# The default, examples/single-worker.yaml, trains the MLP on Fashion-MNIST for one epoch with
# the OneDevice strategy; any other example may be named instead.
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=${1:-examples/single-worker.yaml}

./scripts/install-deps.sh
./scripts/build.sh lockstep lockstep-operator lockstep-trainer

lockstep=build/release/operator/lockstep
"$lockstep" validate "$manifest"
# A state directory of its own, and the local cluster stopped afterwards.
export LOCKSTEP_HOME=${LOCKSTEP_HOME:-$(mktemp -d)}
trap '"$lockstep" local down >/dev/null 2>&1 || true' EXIT
"$lockstep" run "$manifest" --timeout 1200
echo "pod log (the trainer's last lines):"
KUBECONFIG=$LOCKSTEP_HOME/kubeconfig kubectl logs "$(sed -n 's/^  name: //p' "$manifest" | head -1)-worker-0" 2>/dev/null | tail -2 || true
