"""The CourseRequest reconcile: an admin's new course, made from deploy/course/'s shapes.

The request (deploy/crds/courserequests.userland.dev.yaml) is watched in the LTI namespace only
(`USERLAND_LTI_NAMESPACE`; no LTI, no reconciler). A reconcile reads the request from its watch
cache and, unlike the other reconciles, the target namespace and the source Template from the API
(a handful of requests a term: no cluster-wide namespace watch is worth it), then:

- the request does not parse -> Ready False `Invalid`, with what to change;
- the namespace exists and this request did not make it (no `userland.dev/course-request`
  naming it) -> `NameTaken`: it is never touched;
- the Template to copy is missing -> `TemplateNotFound` (looked at again in a minute);
- else each object of platform/model/course_request.py's `course_objects` is created (the
  namespace first, marked as this request's; one already there from an earlier pass is left as
  it is), and Ready True says the course's address.

Once Ready the request is a record: it is not acted on again (deleting the course later does not
bring it back). Objects are created, never patched or deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from userland.operator.apply import Applier
from userland.operator.rules.reconcile import DONE, Memory, Result
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    COURSE_REQUESTS,
    NAMESPACES,
    NETWORK_POLICIES,
    ROLE_BINDINGS,
    TEMPLATES,
    AlreadyExists,
    KubeClient,
    NotFound,
    Resource,
)
from userland.platform.clients.logs import ObjectLogger
from userland.platform.model import course_request as model
from userland.platform.model.objects import meta

log = logging.getLogger("userland.operator")
KIND = model.KIND
TEMPLATE_RETRY_SECONDS = 60.0
RESOURCES: dict[str, Resource] = {"Namespace": NAMESPACES, "RoleBinding": ROLE_BINDINGS,
                                  "NetworkPolicy": NETWORK_POLICIES, "Template": TEMPLATES}
JSON = dict[str, Any]


class CourseRequestReconciler:
    kind = KIND

    def __init__(self, client: KubeClient, applier: Applier, queue: WorkQueue[tuple[str, str, str]],
                 namespace: str, public_url: str, web_namespace: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """`namespace`: where requests live (the LTI namespace); `web_namespace`: the web UI's
        ServiceAccount's, which each course's RoleBinding names (the platform's own namespace)."""
        self.client = client
        self.web_namespace = web_namespace
        self.applier = applier
        self.public_url = public_url
        self.clock = clock
        self.requests = Informer(client, COURSE_REQUESTS, (namespace,))
        self.requests.add_handler(lambda old, new: self._on_request(queue, old, new))
        self._memory: Memory[None] = Memory(lambda obj: None)

    @property
    def primary(self) -> Informer:
        return self.requests

    @property
    def memory(self) -> Memory[None]:
        return self._memory

    @staticmethod
    def _on_request(queue: WorkQueue[tuple[str, str, str]], old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        if old is not None and new is not None and old.get("spec") == new.get("spec"):
            return  # our own status write
        queue.add((KIND, meta(obj).get("namespace", ""), meta(obj).get("name", "")))

    async def reconcile(self, namespace: str, name: str) -> Result:
        obj = self.requests.get(namespace, name)
        if obj is None or meta(obj).get("deletionTimestamp"):
            return DONE
        if model.ready_of(obj).get("status") == "True":
            return DONE  # made: the request is a record now
        outcome, after = await self._make(obj, namespace, name)
        generation = int(meta(obj).get("generation") or 0)
        now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        status = model.status_of(outcome, generation, now, obj.get("status"))
        await self.applier.status(COURSE_REQUESTS, self.requests, obj, status)
        if outcome.ready:
            ObjectLogger(log, namespace, name).info("course made", extra={"course": obj["spec"]["course"]})
        return after

    async def _make(self, obj: JSON, namespace: str, name: str) -> tuple[model.Outcome, Result]:
        try:
            request = model.CourseRequest.parse(obj.get("spec"))
        except model.InvalidRequest as err:
            return model.invalid(str(err)), DONE
        mark = model.marker(namespace, name)
        try:
            existing: JSON | None = await self.client.get(NAMESPACES, None, request.course)
        except NotFound:
            existing = None
        if existing is not None and not model.is_ours(existing, mark):
            return model.name_taken(request.course), DONE
        if existing is not None and meta(existing).get("deletionTimestamp"):
            return model.being_deleted(request.course), Result.again_in(TEMPLATE_RETRY_SECONDS)
        try:
            source = await self.client.get(TEMPLATES, request.template_namespace, request.template_name)
        except NotFound:
            return model.template_missing(request), Result.again_in(TEMPLATE_RETRY_SECONDS)
        for wanted in model.course_objects(request, mark, self.web_namespace, source):
            resource = RESOURCES[wanted["kind"]]
            if wanted["kind"] == "Namespace" and existing is not None:
                continue
            try:
                await self.client.create(resource, meta(wanted).get("namespace"), wanted)
            except AlreadyExists:
                if wanted["kind"] == "Namespace":  # made a moment ago by someone else: look again
                    raise
        return model.done(request, self.public_url), DONE
