#pragma once
// The edge between the API's objects and the planner's typed view (observed.h): pods are
// decoded and projected into ObservedPod once, by the pod informer, and a ChildKind maps to
// the REST resource the reconciler writes.
// Thread-safety: pure functions.

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/kube/pod.h"
#include "operator/kube/rest_client.h"
#include "operator/trainingjob/desired.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob {

// What the planner reads of a child's metadata (observed.h): its replica labels parsed, its
// controlling owner reference, and nothing more, so that the caches of 20,000 pods and
// Services stay small.
ChildMeta ObserveChildMeta(const api::ObjectMeta& m);

// The pod as the planner sees it: ObserveChildMeta, and of its conditions only what the
// planner reads (Ready, DisruptionTarget, an unschedulable PodScheduled).
ObservedPod ObservePod(const kube::Pod& pod);
// kube::DecodePod, then ObservePod: the pod informer's decoder.
absl::StatusOr<ObservedPod> DecodeObservedPod(const nlohmann::json& j);

// The REST resource of a child kind; kPodGroup depends on the gang scheduler.
const kube::Resource& ResourceOf(ChildKind kind, GangScheduler gang);

}  // namespace lockstep::trainingjob
