"""`lockstep local` driven by the official Kubernetes Python client, a client nobody here wrote.

Every call is one a TensorFlow team's script makes: the server's version, a TrainingJob created,
watched to Succeeded, patched and scaled through its scale subresource; its pods listed and
watched; a pod's log; the job's events; a pod created, patched and deleted. The client parses
every answer into its typed models, so a missing required field fails here as it would fail a
user's script.

Usage: /usr/bin/python3 local_python_client.py KUBECONFIG
"""

import sys

from kubernetes import client, config, watch

GROUP, VERSION, PLURAL = "lockstep.io", "v1alpha1", "trainingjobs"
NS = "default"


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def shell_job(name, chief_script, suspend=False):
    def replica(script):
        return {
            "replicas": 1,
            "restartPolicy": "ExitCode",
            "template": {"spec": {"containers": [{
                "name": "main", "image": "debian:bookworm-slim",
                "command": ["/bin/sh", "-c", script]}]}},
        }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"team": "vision"}},
        "spec": {
            "strategy": "MultiWorkerMirrored",
            "replicaSpecs": {"Chief": replica(chief_script), "Worker": replica("exit 0")},
            "runPolicy": {"backoffLimit": 1, "suspend": suspend, "cleanPodPolicy": "None"},
        },
    }


def condition(job, kind):
    for c in job.get("status", {}).get("conditions", []):
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def main():
    config.load_kube_config(config_file=sys.argv[1])
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    # /version/: every field of the typed VersionInfo.
    info = client.VersionApi(api).get_code()
    check(info.major == "1" and info.git_version.startswith("v1."),
          f"VersionApi().get_code() reads {info.git_version}")
    check(any(g.name == GROUP for g in client.ApisApi(api).get_api_versions().groups),
          "discovery lists the lockstep.io group")
    check(any(n.metadata.name == NS for n in core.list_namespace().items),
          "the default namespace is listed")

    # A job, created and watched to Succeeded.
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, shell_job("hello", 'echo "hello from the chief: $TF_CONFIG"'))
    check(created["metadata"]["uid"], "a TrainingJob is created")
    w = watch.Watch()
    succeeded = None
    for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                          timeout_seconds=240):
        job = event["object"]
        if job["metadata"]["name"] == "hello" and condition(job, "Succeeded"):
            succeeded = job
            w.stop()
    check(succeeded is not None, "watch=True streams the job until it has Succeeded")

    # Its pods: listed by label, typed.
    pods = core.list_namespaced_pod(NS, label_selector="lockstep.io/job-name=hello").items
    names = sorted(p.metadata.name for p in pods)
    check(names == ["hello-chief-0", "hello-worker-0"], f"the job's pods are {names}")
    chief = next(p for p in pods if p.metadata.name == "hello-chief-0")
    # The chief decides the job's success; the worker may still be finishing.
    check(chief.status.phase == "Succeeded", "the chief's pod Succeeded")
    check(chief.spec.containers[0].termination_message_path == "/dev/termination-log",
          "pods carry the server's defaults")
    check(chief.status.container_statuses and chief.status.container_statuses[0].image_id
          is not None, "container statuses parse with their required fields")

    # A pod watch: the client's typed events.
    seen = set()
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=30):
        seen.add((event["type"], event["object"].metadata.name))
        if len(seen) >= 2:
            w.stop()
    check(("ADDED", "hello-chief-0") in seen, "a pod watch yields typed ADDED events")

    # The chief's log.
    log = core.read_namespaced_pod_log("hello-chief-0", NS)
    check("hello from the chief" in log and '"chief"' in log,
          "read_namespaced_pod_log returns the chief's output with its TF_CONFIG")

    # The job's events.
    events = core.list_namespaced_event(
        NS, field_selector="involvedObject.kind=TrainingJob,involvedObject.name=hello").items
    reasons = {e.reason for e in events}
    check(events and all(e.involved_object.name == "hello" for e in events),
          f"the job's events, by field selector: {sorted(reasons)}")

    # Patch and scale a suspended job.
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                           shell_job("paused", "exit 0", suspend=True))
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "paused", {"metadata": {"labels": {"team": "nlp"}}})
    check(patched["metadata"]["labels"]["team"] == "nlp", "a merge patch relabels the job")
    scale = custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, NS, PLURAL, "paused", {"spec": {"replicas": 3}})
    check(scale["spec"]["replicas"] == 3, "the scale subresource takes 3 replicas")
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "paused")
    check(got["spec"]["replicaSpecs"]["Worker"]["replicas"] == 3, "the job's spec has 3 workers")
    check(got["metadata"]["generation"] == 2, "scaling bumped the generation")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                  label_selector="team=nlp")
    check([j["metadata"]["name"] for j in listed["items"]] == ["paused"],
          "a label selector finds the relabelled job")

    # A pod of one's own: create, patch, delete, typed throughout.
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="scratch", labels={"app": "scratch"}),
        spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
            name="main", image="debian:bookworm-slim", command=["/bin/sh", "-c", "exit 0"])]))
    made = core.create_namespaced_pod(NS, pod)
    check(made.spec.dns_policy == "ClusterFirst", "create_namespaced_pod returns a defaulted pod")
    relabelled = core.patch_namespaced_pod("scratch", NS, {"metadata": {"labels": {"v": "2"}}})
    check(relabelled.metadata.labels.get("v") == "2", "patch_namespaced_pod relabels the pod")
    try:
        core.patch_namespaced_pod("scratch", NS, {"spec": {"restartPolicy": "Always"}})
        check(False, "a pod's restart policy cannot be patched")
    except client.exceptions.ApiException as e:
        check(e.status == 422, "a pod's restart policy cannot be patched (422)")
    # gracePeriodSeconds=0 removes it from the API at once, running or not.
    core.delete_namespaced_pod("scratch", NS, grace_period_seconds=0)
    try:
        core.read_namespaced_pod("scratch", NS)
        check(False, "the scratch pod is deleted")
    except client.exceptions.ApiException as e:
        check(e.status == 404, "the scratch pod is deleted (404)")

    for name in ("hello", "paused"):
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name,
                                               propagation_policy="Foreground")
    left = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]
    check(not left, "both jobs are deleted")
    print("PASS")


if __name__ == "__main__":
    main()
