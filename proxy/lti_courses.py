"""Where an LTI launch lands, from the gateway's routing data: the Templates an LMS context is
linked to (their `userland.dev/lti-contexts` annotation, from the Template watch: no API request),
and a Learner's own environment of one made when they have none yet.

The LMS says who its course's Learners are, and an admin linked that course to the Template, so
a Learner's launch is reason enough to give them their environment (as `selfService` is for a
visit); a suspended one stays suspended. auth/lti.py calls these through `LtiContext`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from userland.auth.lti_context import LtiTarget
from userland.platform.clients.kube import USERLANDS, AlreadyExists, KubeClient, KubeError
from userland.platform.model import naming
from userland.platform.model.bodies import userland_body
from userland.platform.model.lti import linked_contexts
from userland.platform.model.lti_links import linked_courses
from userland.proxy.routes_cache import RoutingCache

log = logging.getLogger(__name__)


def linked_targets(routes: RoutingCache, registration: str, context: str,
                   courses: Iterable[Mapping[str, Any]] = ()) -> list[LtiTarget]:
    """The host-routed Templates linked to `context` of the LtiRegistration `registration`: by
    the Template's `userland.dev/lti-contexts` annotation (an admin's), or by the course's
    `userland.dev/lti-links` (an instructor's choice, platform/model/lti_links.py)."""
    found = []
    for namespace, link in linked_courses(courses, registration, context):
        obj = routes.templates.get(namespace, link.template)
        host = (((obj or {}).get("spec") or {}).get("routing") or {}).get("host")
        if isinstance(host, str) and host:
            found.append(LtiTarget(namespace=namespace, template=link.template, host=host.lower()))
    for obj in routes.templates.items():
        metadata: dict[str, Any] = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if (registration, context) not in linked_contexts(annotations.get(naming.ANNOTATION_LTI_CONTEXTS)):
            continue
        host = ((obj.get("spec") or {}).get("routing") or {}).get("host")
        if isinstance(host, str) and host:
            found.append(
                LtiTarget(
                    namespace=str(metadata.get("namespace", "")),
                    template=str(metadata.get("name", "")),
                    host=host.lower(),
                )
            )
    return sorted(set(found), key=lambda t: (t.namespace, t.template))


async def ensure_environment(routes: RoutingCache, kube: KubeClient, target: LtiTarget, login: str) -> bool:
    """`login`'s Userland of `target`, made when there is none; False when it could not be."""
    name = naming.userland_name(target.template, login)
    if routes.userlands.get(target.namespace, name) is not None:
        return True
    try:
        await kube.create(
            USERLANDS, target.namespace, userland_body(target.template, login, namespace=target.namespace)
        )
    except AlreadyExists:
        return True
    except KubeError as err:
        log.warning(
            "LTI: environment not created",
            extra={
                "event": "lti.environment_failed",
                "userland": f"{target.namespace}/{name}",
                "error": str(err)[:200],
            },
        )
        return False
    log.info(
        "LTI: environment created for a Learner",
        extra={"event": "lti.environment_created", "userland": f"{target.namespace}/{name}", "user": login},
    )
    return True
