"""A Template's images, pulled ahead on every node its environments may land on (pure).

As z2jh's continuous image pullers: a DaemonSet per image set, whose Pods pull each image in an
init container (that runs one shell builtin and exits) and then keep a pause container, so the
DaemonSet's `numberReady` of `desiredNumberScheduled` says on how many of the nodes the
Template's Pods may land on (its nodeSelector, node affinity and tolerations) every image is.

- `desired_prepull(template, settings)`: the DaemonSet, owned by the Template (it goes with the
  Template), named by the digest of what it pulls and where, so a new image makes a new
  DaemonSet (the old one is deleted), and its status speaks of the new image set only.
- `prepull_progress(daemonset, ...)`: "images on n/N nodes", from that DaemonSet's status.
- `hold_rollout(...)`: whether an environment keeps its current image for now, because the
  Template's new one is not on the nodes yet (from the Template's `ImagesPulled` condition;
  bounded: `limit` seconds after the pull began it rolls anyway, and says so).

The puller's init containers run `/bin/sh -c true` in the Template's image: an image without a
shell (distroless) is pulled, but its init container fails, and the progress never completes
(the status says the pull could not be confirmed; docs/capacity.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from userland.operator.rules.builders import owner_reference, spec_hash
from userland.platform.model import naming
from userland.platform.model.models import Template, parse_time
from userland.platform.model.settings import Settings

JSON = dict[str, Any]
CAPACITY_IMAGES = "images"
PULL_COMMAND = ("/bin/sh", "-c", "true")
# Requests and limits of every container of a puller: tiny, and set, so a course's quota that
# asks for limits admits them.
TINY = {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}}
NOBODY = 65534
# What the "restricted" Pod Security Standard asks, so a course namespace that enforces it admits them.
POD_SECURITY: JSON = {"runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY,
                      "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY: JSON = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}

Reason = Literal["Pulled", "Pulling", "NoNodes", "ImagesLocal", "NotInUse"]


def image_set(template: Template) -> tuple[str, ...]:
    """Every image the Template's Pods run (init containers included), each once, in order."""
    pod_spec = template.spec.pod_spec
    images = [c.get("image") for key in ("initContainers", "containers") for c in pod_spec.get(key) or []
              if isinstance(c, dict)]
    return tuple(sorted({i for i in images if isinstance(i, str) and i}))


def placement(pod_spec: JSON) -> JSON:
    """Where the Template's Pods may land: its nodeSelector, node affinity and tolerations (pod
    affinity speaks of other Pods, which a puller does not follow)."""
    found: JSON = {}
    if isinstance(pod_spec.get("nodeSelector"), dict) and pod_spec["nodeSelector"]:
        found["nodeSelector"] = dict(pod_spec["nodeSelector"])
    affinity = pod_spec.get("affinity")
    if isinstance(affinity, dict) and isinstance(affinity.get("nodeAffinity"), dict):
        found["affinity"] = {"nodeAffinity": affinity["nodeAffinity"]}
    if isinstance(pod_spec.get("tolerations"), list) and pod_spec["tolerations"]:
        found["tolerations"] = list(pod_spec["tolerations"])
    return found


def _pod_template(template: Template, settings: Settings, labels: dict[str, str]) -> JSON:
    pod_spec = template.spec.pod_spec
    spec: JSON = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": POD_SECURITY,
        **placement(pod_spec),
        "initContainers": [
            {"name": f"pull-{i}", "image": image, "imagePullPolicy": "IfNotPresent",
             "command": list(PULL_COMMAND), "resources": TINY, "securityContext": CONTAINER_SECURITY}
            for i, image in enumerate(image_set(template))
        ],
        "containers": [{"name": "pause", "image": settings.pause_image, "imagePullPolicy": "IfNotPresent",
                        "resources": TINY, "securityContext": CONTAINER_SECURITY}],
    }
    if isinstance(pod_spec.get("imagePullSecrets"), list) and pod_spec["imagePullSecrets"]:
        spec["imagePullSecrets"] = list(pod_spec["imagePullSecrets"])  # a private registry's
    return {"metadata": {"labels": labels}, "spec": spec}


def capacity_labels(template: Template, what: str) -> dict[str, str]:
    return {naming.LABEL_CAPACITY: what, naming.LABEL_CAPACITY_FOR: template.name}


def prepull_digest(template: Template, settings: Settings) -> str:
    """What a puller pulls and where, as a digest: the DaemonSet's name and its Pods' label."""
    return spec_hash(_pod_template(template, settings, {}))


def desired_prepull(template: Template, settings: Settings) -> JSON:
    digest = prepull_digest(template, settings)
    pod_labels = {**capacity_labels(template, CAPACITY_IMAGES), naming.LABEL_IMAGE_SET: digest}
    body: JSON = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": naming.prepull_name(template.name, digest),
            "namespace": template.ref.namespace,
            "labels": {**pod_labels, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            "annotations": {naming.ANNOTATION_SPEC_HASH: digest},
            "ownerReferences": [owner_reference("Template", template.name, template.ref.uid)],
        },
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": _pod_template(template, settings, pod_labels),
        },
    }
    return body


@dataclass(frozen=True)
class ImageProgress:
    """On how many of the nodes that may run the Template's Pods its images are."""

    reason: Reason
    message: str
    ready: int = 0
    nodes: int = 0
    late: bool = False  # pulling for longer than environments wait for it (past_the_wait)

    @property
    def complete(self) -> bool:
        return self.reason in ("Pulled", "ImagesLocal", "NotInUse")

    def condition_status(self) -> Literal["True", "False"]:
        return "True" if self.complete else "False"


def _images(count: int) -> str:
    return "image" if count == 1 else "images"


def prepull_progress(daemonset: JSON | None, image_count: int, *, local: bool = False) -> ImageProgress:
    """`daemonset`: the puller of the Template's current image set, as the cluster has it (None:
    not made yet); `local`: `make run`, where environments run on this machine."""
    words = _images(image_count)
    if local:
        return ImageProgress("ImagesLocal", "images are local: nothing to pull")
    if daemonset is None:
        return ImageProgress("Pulling", f"{words} on 0 nodes yet: the image puller is being made")
    generation = int((daemonset.get("metadata") or {}).get("generation") or 0)
    status = daemonset.get("status") or {}
    if "desiredNumberScheduled" not in status or int(status.get("observedGeneration") or 0) < generation:
        return ImageProgress("Pulling", f"{words} on 0 nodes yet: waiting for the nodes to be counted")
    nodes = int(status.get("desiredNumberScheduled") or 0)
    ready = min(int(status.get("numberReady") or 0), nodes)
    if nodes == 0:
        return ImageProgress("NoNodes", "no node can run this Template's environments now (its nodeSelector,"
                                        " affinity and tolerations match none)")
    if ready >= nodes:
        return ImageProgress("Pulled", f"{words} on {ready}/{nodes} nodes", ready, nodes)
    return ImageProgress("Pulling", f"{words} on {ready}/{nodes} nodes", ready, nodes)


def pull_wait_ends(template_status: JSON, limit: float) -> datetime | None:
    """When environments stop waiting for the Template's images (None: they do not wait now)."""
    condition = next((c for c in template_status.get("conditions") or []
                      if isinstance(c, dict) and c.get("type") == "ImagesPulled"), {})
    if condition.get("status") != "False" or condition.get("reason") == "NoNodes" or limit <= 0:
        return None
    since = parse_time(condition.get("lastTransitionTime"))
    return None if since is None else since + timedelta(seconds=limit)


def past_the_wait(progress: ImageProgress, template_status: JSON, *, now: datetime,
                  limit: float) -> ImageProgress:
    """`progress`, saying so when environments no longer wait for the images (the pull began
    over `limit` seconds ago, by the ImagesPulled condition the Template's status has)."""
    if progress.complete or progress.reason == "NoNodes" or limit <= 0:
        return progress
    ends = pull_wait_ends(template_status, limit)
    if ends is None or now < ends:
        return progress
    minutes = round(limit / 60)
    return replace(progress, late=True,
                   message=f"{progress.message}; environments no longer wait for it (it has been "
                           f"pulling for over {minutes} min): they pull it as they start")


def deployment_images(deployment: JSON | None) -> tuple[str, ...]:
    """The image set a Deployment's Pods run now (empty: no Deployment)."""
    pod_spec = ((((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
    images = [c.get("image") for key in ("initContainers", "containers") for c in pod_spec.get(key) or []
              if isinstance(c, dict)]
    return tuple(sorted({i for i in images if isinstance(i, str) and i}))


@dataclass(frozen=True)
class Hold:
    """Whether an environment keeps its current Pod spec for now; when to look again."""

    held: bool
    recheck_at: datetime | None = None
    message: str = ""


# While the Template's own status has not caught up with its spec, look again this soon.
CATCH_UP = timedelta(seconds=5)


def hold_rollout(deployment: JSON | None, template: Template, template_status: JSON, *,
                 now: datetime, limit: float) -> Hold:
    """Whether an environment whose Deployment runs another image set than its Template's keeps
    it for now, because the new images are not on the nodes yet. `template_status`: the
    Template's status; its `ImagesPulled` condition says where the images are. It holds while
    that condition is False for the Template's current generation (or the status has not caught
    up with that generation yet), at most `limit` seconds from the condition's last transition:
    a node that never pulls, or an image that never comes, must not hold a class back for ever;
    then it rolls, and says so. A Template without the condition (its spec has a problem, or
    nothing pulls: `make run`) holds nothing."""
    current = deployment_images(deployment)
    if not current or current == image_set(template):
        return Hold(False)
    if int(template_status.get("observedGeneration") or 0) < template.ref.generation:
        # The operator has not looked at this generation's images yet: wait for it (briefly).
        return Hold(True, now + CATCH_UP, "keeps its current image until the new one is on the nodes")
    condition = next((c for c in template_status.get("conditions") or []
                      if isinstance(c, dict) and c.get("type") == "ImagesPulled"), None)
    if condition is None or condition.get("status") == "True" or condition.get("reason") == "NoNodes":
        return Hold(False)
    since = parse_time(condition.get("lastTransitionTime")) or now
    until = since + timedelta(seconds=limit)
    if now >= until:
        return Hold(False, message="the new image was not on every node in time: it rolled anyway")
    return Hold(True, until, "keeps its current image until the new one is on every node "
                             f"({condition.get('message') or 'pulling'})")
