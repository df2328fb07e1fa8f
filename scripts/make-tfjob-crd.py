#!/usr/bin/env python3
"""Writes crds/kubeflow.org_tfjobs.yaml: Kubeflow's TFJob CustomResourceDefinition as
training-operator v1.9.0 publishes it (manifests/base/crds/kubeflow.org_tfjobs.yaml, Apache
License 2.0), with the status fields of Lockstep's TrainingJob added beside TFJob's own.

Nothing of Kubeflow's schema is changed: the spec, the printer columns and TFJob's status
fields are as published. The additions are the operator's memory of a job (restartCount,
attempt, the failures already counted, in-place recoveries, progress, evaluation...), which an
API server would prune from a status its CRD does not declare.

Usage: make-tfjob-crd.py KUBEFLOW_TFJOBS_CRD LOCKSTEP_TRAININGJOBS_CRD > OUT
"""
import sys

import yaml


def status_schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def add_missing(into, source):
    """Adds source's properties that `into` lacks; returns their names."""
    added = []
    for name, schema in source.get("properties", {}).items():
        if name not in into.setdefault("properties", {}):
            into["properties"][name] = schema
            added.append(name)
    return added


def main():
    kubeflow = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d][0]
    ours = yaml.safe_load(open(sys.argv[2]))
    theirs = status_schema(kubeflow)
    mine = status_schema(ours)
    added = add_missing(theirs, mine)
    conditions = theirs["properties"]["conditions"]["items"]
    mine_conditions = dict(mine["properties"]["conditions"]["items"])
    mine_conditions["properties"] = {
        k: v for k, v in mine_conditions["properties"].items() if k != "type"}
    added += ["conditions[]." + n for n in add_missing(conditions, mine_conditions)]
    replicas = theirs["properties"]["replicaStatuses"]["additionalProperties"]
    added += ["replicaStatuses.*." + n for n in add_missing(
        replicas, mine["properties"]["replicaStatuses"]["additionalProperties"])]
    kubeflow["metadata"].setdefault("labels", {})["app.kubernetes.io/part-of"] = "lockstep"
    print("# Kubeflow's TFJob CustomResourceDefinition (kubeflow.org/v1), as training-operator v1.9.0")
    print("# publishes it (manifests/base/crds/kubeflow.org_tfjobs.yaml, Apache License 2.0), with")
    print("# the status fields of Lockstep's TrainingJob added beside TFJob's own, so the operator")
    print("# keeps its memory of a served TFJob (restarts counted, recoveries, progress). Nothing of")
    print("# Kubeflow's schema is changed. Written by scripts/make-tfjob-crd.py; added:")
    line = "#  "
    for name in added:
        if len(line) + len(name) + 1 > 100:
            print(line)
            line = "#  "
        line += " " + name
    print(line)
    sys.stdout.write(yaml.safe_dump(kubeflow, sort_keys=False, width=100))


if __name__ == "__main__":
    main()
