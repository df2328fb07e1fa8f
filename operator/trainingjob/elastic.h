#pragma once
// The Worker count an elastic job runs at (runPolicy.elastic; MultiWorkerMirrored).
//
// `kubectl scale tj/NAME --replicas=N` writes spec.replicaSpecs.Worker.replicas through the
// scale subresource. The operator accepts a new count when it lies within runPolicy.elastic (the
// CRD's CEL rule refuses others at the API from Kubernetes 1.25; this is the check for older
// servers) and, once the chief has reported the global batch (status.progress.globalBatch),
// when the group it makes (chiefs + workers) divides that batch; otherwise the job stays at the
// count it runs at, status.elastic.refused says why and a ResizeRefused event is recorded.
// An accepted count creates the added workers' pods (they join the running group at a step
// boundary) or deletes the highest-indexed ones (they leave at a step boundary): no restart.
// The planner plans with the count accepted (status.elastic.workers) in place of the spec's.
// Thread-safety: pure function over values.

#include <vector>

#include "operator/trainingjob/planner.h"

namespace lockstep::trainingjob {

// Whether `job` is elastic (the planner then plans through HoldElasticWorkers).
bool IsElastic(const api::TrainingJob& job);

// The replica counts a running job keeps (every type but an elastic job's Workers): recorded in
// status.replicaCounts before it runs and while it is suspended; a spec count changed while it
// runs is planned at the recorded one instead, with SpecRefused True and a ScaleRefused event
// (the CRD's CEL rule refuses such a change from Kubernetes 1.25; this is the hold for servers
// without it: a count that no TF_CONFIG of the running group lists would fail the job).
// Sets o.job.status and o.job.spec's held counts. Returns the events to record.
std::vector<PlannedEvent> HoldReplicaCounts(Observed& o);

// Decides the Worker count of `o`'s elastic job: sets o.job.status.elastic, and the Worker
// replicas of o.job.spec to the count accepted. Returns the events to record.
std::vector<PlannedEvent> HoldElasticWorkers(Observed& o);

}  // namespace lockstep::trainingjob
