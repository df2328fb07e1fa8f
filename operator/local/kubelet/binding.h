#pragma once
// What a scheduler does for `lockstep local`: binds a pod to the one node with a Binding (a
// pod's spec.nodeName is not otherwise updated). Shared by the runner and the pod simulator.
// Thread-safety: as the client.

#include <string>

#include "operator/api/object_meta.h"
#include "operator/kube/rest_client.h"

namespace lockstep::local {

// Best effort: a pod deleted or bound meanwhile answers an error the next tick makes moot.
inline void BindPod(kube::RestClient* client, const api::ObjectMeta& pod, const std::string& node) {
  (void)client->CreateSubresource(
      kube::resources::kPods, pod.namespace_, pod.name, "binding",
      {{"apiVersion", "v1"},
       {"kind", "Binding"},
       {"metadata", {{"name", pod.name}, {"uid", pod.uid}}},
       {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}});
}

}  // namespace lockstep::local
