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

// What the planner reads of a child's metadata, and nothing more, so that the caches of
// 20,000 pods and Services stay small: of the labels only the replica type and index and the
// attempt (the job's name is the informers' selector, and the owner reference names the job),
// no annotations, finalizers or unmodelled fields.
void TrimChildMetadata(api::ObjectMeta& m);

// The pod as the planner sees it: TrimChildMetadata, and of its conditions only those the
// planner reads (Ready, PodScheduled, DisruptionTarget).
ObservedPod ObservePod(const kube::Pod& pod);
// kube::DecodePod, then ObservePod: the pod informer's decoder.
absl::StatusOr<ObservedPod> DecodeObservedPod(const nlohmann::json& j);

// The REST resource of a child kind; kPodGroup depends on the gang scheduler.
const kube::Resource& ResourceOf(ChildKind kind, GangScheduler gang);

}  // namespace lockstep::trainingjob
