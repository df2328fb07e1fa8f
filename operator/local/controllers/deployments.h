#pragma once
// DeploymentController: the part of kube-controller-manager that `lockstep local` needs to run
// what a Helm chart installs. For each apps/v1 Deployment it keeps spec.replicas pods of the
// current template running, owned by the Deployment (so deleting it deletes them):
//  - a pod is "<deployment>-<template hash>-<5 random>" (generateName), labelled
//    pod-template-hash, with the template's labels, annotations and spec;
//  - pods of an older template are deleted and replaced (the Recreate strategy, with no
//    ReplicaSets in between), failed pods are replaced, extra pods are deleted;
//  - status: observedGeneration, replicas, updatedReplicas, readyReplicas, availableReplicas
//    and the Available and Progressing conditions, so `kubectl rollout status` and
//    `kubectl wait --for=condition=Available` work.
// Level-triggered: each pass lists Deployments and pods and converges; Run() passes every
// `interval` until stopped.
// Thread-safety: Run() on one thread.

#include <stop_token>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/kube/rest_client.h"

namespace lockstep::local {

class DeploymentController {
 public:
  DeploymentController(kube::RestClient* client, common::Clock* clock,
                       absl::Duration interval = absl::Milliseconds(500));

  void Run(std::stop_token stop);
  // One pass over every Deployment (for tests).
  void Sync();

 private:
  void SyncOne(const nlohmann::json& deployment, const nlohmann::json& pods);

  kube::RestClient* client_;
  common::Clock* clock_;
  absl::Duration interval_;
};

// The pod-template-hash of a Deployment's template: 10 hex digits of a hash of its JSON.
std::string PodTemplateHash(const nlohmann::json& pod_template);

}  // namespace lockstep::local
