"""Helpers shared by the web UI tests: course namespaces, Userlands, status as the operator writes it."""

from __future__ import annotations

import time
from typing import Any

from userland.platform.clients.kube import NAMESPACES, USERLANDS, KubeClient
from userland.platform.model import naming


async def make_course(kube: KubeClient, namespace: str, *, instructors: str = "teacher",
                      assistants: str = "ta1", title: str = "") -> None:
    annotations = {"userland.dev/instructors": instructors, "userland.dev/assistants": assistants}
    if title:
        annotations["userland.dev/title"] = title
    await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
        "labels": {naming.LABEL_COURSE: "true"}, "annotations": annotations}})


async def add_userland(kube: KubeClient, namespace: str, user: str, template: str = "ide",
                       **annotations: str) -> dict[str, Any]:
    body = {"apiVersion": "userland.dev/v1alpha1", "kind": "Userland",
            "metadata": {"name": f"{template}-{user}", "annotations": annotations},
            "spec": {"user": user, "template": template}}
    return await kube.create(USERLANDS, namespace, body)


async def set_phase(kube: KubeClient, namespace: str, name: str, phase: str, *, reason: str = "",
                    message: str = "", url: str = "") -> None:
    """Write a Userland's status as the operator does (status subresource)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {"phase": phase, "conditions": [{
        "type": "Ready", "status": "True" if phase == "Ready" else "False",
        "reason": reason or ("Available" if phase == "Ready" else phase),
        "message": message or f"the environment is {phase.lower()}", "lastTransitionTime": now}]}
    if url:
        status["url"] = url
    await kube.merge_patch(USERLANDS, namespace, name, {"status": status}, subresource="status")


