"""The local runner and Pods that run to completion (restartPolicy Never or OnFailure), as the
operator's assignment workers are: phases Succeeded and Failed as a kubelet reports them, no second
run of a finished Pod, activeDeadlineSeconds, and the platform's own program (`userland`) run as
the environments' account. Real: the control plane, the runner, the processes (Debian's sh)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support import MUST_COMPLETE, eventually
from tests.support.pods import container_state
from userland.local.runner import LocalRunner
from userland.platform.clients.kube import PODS, KubeClient
from userland.platform.model import naming

JSON = dict[str, Any]


def job_pod(name: str, script: str, *, policy: str = "Never", deadline: int | None = None,
            claim: str | None = None) -> JSON:
    spec: JSON = {"restartPolicy": policy, "containers": [
        {"name": "work", "image": "userland:1", "command": ["sh", "-c", script]}]}
    if claim is not None:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}, "spec": spec}


async def phase(kube: KubeClient, namespace: str, name: str, wanted: str) -> JSON | None:
    pod = await kube.get(PODS, namespace, name)
    return pod if (pod.get("status") or {}).get("phase") == wanted else None


async def test_a_pod_that_succeeds_is_succeeded_and_never_run_again(
        kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    claim = f"runs-{uuid.uuid4().hex[:6]}"
    await kube.create(PODS, namespace, job_pod("once", "echo ran >> /data/runs", claim=claim))
    pod = await eventually(lambda: phase(kube, namespace, "once", "Succeeded"), timeout=MUST_COMPLETE)
    state = container_state(pod, "work")
    assert state["state"]["terminated"]["exitCode"] == 0
    assert state["state"]["terminated"]["reason"] == "Completed"
    assert state["restartCount"] == 0
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in pod["status"]["conditions"]}
    assert conditions["Ready"] == ("False", "PodCompleted")
    # Another Pod's change makes the runner look again: the finished one is not run again.
    await kube.create(PODS, namespace, job_pod("later", "true"))
    await eventually(lambda: phase(kube, namespace, "later", "Succeeded"), timeout=MUST_COMPLETE)
    runs = Path(runner._claims_root) / namespace / claim / "runs"
    assert runs.read_text() == "ran\n"


async def test_never_fails_once_and_on_failure_restarts_until_it_succeeds(
        kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    await kube.create(PODS, namespace, job_pod("fails", "echo broken >&2; exit 3"))
    pod = await eventually(lambda: phase(kube, namespace, "fails", "Failed"), timeout=MUST_COMPLETE)
    terminated = container_state(pod, "work")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (3, "Error", "broken")
    claim = f"flaky-{uuid.uuid4().hex[:6]}"
    await kube.create(PODS, namespace, job_pod(
        "flaky", "if [ -e /data/tried ]; then exit 0; fi; touch /data/tried; exit 1", policy="OnFailure",
        claim=claim))
    pod = await eventually(lambda: phase(kube, namespace, "flaky", "Succeeded"), timeout=MUST_COMPLETE)
    assert container_state(pod, "work")["restartCount"] == 1


async def test_a_pod_past_its_deadline_is_stopped_and_failed(kube: KubeClient, namespace: str,
                                                             runner: LocalRunner) -> None:
    await kube.create(PODS, namespace, job_pod("slow", "sleep 600", deadline=1))
    pod = await eventually(lambda: phase(kube, namespace, "slow", "Failed"), timeout=MUST_COMPLETE)
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert not any(c.process for w in runner.workers.values() for c in w.containers)


async def test_the_platforms_own_program_runs_as_the_environments_account(
        kube: KubeClient, namespace: str, runner: LocalRunner) -> None:
    """`userland` is the image's entry point in a cluster; the runner runs this installation's."""
    body = job_pod("own", "")
    body["spec"]["containers"][0].update({"command": ["userland"], "args": ["assignment-work"]})
    await kube.create(PODS, namespace, body)
    pod = await eventually(lambda: phase(kube, namespace, "own", "Failed"), timeout=MUST_COMPLETE)
    terminated = container_state(pod, "work")["state"]["terminated"]
    # It ran (and said what it lacks: the operator gives its Pods their job).
    assert terminated["exitCode"] == 2
    assert "USERLAND_JOB is not set" in terminated["message"]


async def test_a_grading_pods_processes_are_bounded(kube: KubeClient, namespace: str,
                                                    runner: LocalRunner) -> None:
    """A fork bomb in a grading Pod (docs/grading.md) stops at the runner's process limit, where the
    runner has cgroups (a cluster's node has its podPidsLimit)."""
    if runner.confinement is None or runner.confinement.cgroups is None:
        return  # no cgroups here (not root): nothing to bound with, as docs/grading.md says
    script = "i=0; while [ $i -lt 400 ]; do sleep 60 & i=$((i+1)); done; echo all-started"
    body = job_pod("grader", script)
    body["metadata"]["labels"][naming.LABEL_COMPONENT] = naming.GRADER_COMPONENT
    await kube.create(PODS, namespace, body)
    pod = await eventually(lambda: phase(kube, namespace, "grader", "Failed"), timeout=MUST_COMPLETE)
    terminated = container_state(pod, "work")["state"]["terminated"]
    assert terminated["exitCode"] != 0 and "fork" in terminated["message"].lower(), terminated
    # The same script in another Pod is not bounded that way (here: 20 processes, well within).
    await kube.create(PODS, namespace, job_pod("other", script.replace("400", "20")))
    pod = await eventually(lambda: phase(kube, namespace, "other", "Succeeded"), timeout=MUST_COMPLETE)
