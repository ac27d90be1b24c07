"""Helpers for the web UI's form/action/admin/audit page tests. What is real: everything.

- the web UI is the project's `create_app` served by `aiohttp_client` (a real HTTP server on
  loopback), talking to the real control plane as its own ServiceAccount (`web-token`, with
  deploy/rbac/ applied and each course's RoleBinding from deploy/course/), and to a real Redis
  database of its own (`PAGES_TEST_DB`, flushed per test); tests arrange and check the
  cluster with the admin client `kube`;
- the gateway's part, the signed identity, is made with the gateway's own signing code
  (platform/model/identity.py), as the gateway does for every request it forwards;
- a course is a fresh test namespace labelled and annotated as deploy/course/ does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.operator.support import template_body
from tests.web.course_support import render_course
from userland.platform.clients.kube import (
    NAMESPACES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    PermanentError,
    Resource,
)
from userland.platform.model import identity
from userland.platform.model.settings import Settings
from userland.web.rules import security

SECRET = "p" * 40
PUBLIC = "http://userland.test"
PAGES_TEST_DB = 14  # tests/auth use 9, the proxy tests 0, the browser tests 12

ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")

INSTRUCTOR = "teacher"
ASSISTANT = "ta1"


# The gateway session a signed-in user's requests come with (the identity carries its id).
SESSION_ID = "5e55" * 8


def headers(login: str, role: str = "student", *, origin: str | None = PUBLIC) -> dict[str, str]:
    ident = identity.for_audience(login, "web", role=role, session=SESSION_ID)
    result = dict(identity.identity_headers(ident, SECRET))
    if origin is not None:
        result["Origin"] = origin
    return result


async def make_course(kube: KubeClient, namespace: str, *, title: str = "", bind: bool = True) -> None:
    """Label and annotate the namespace as a course; `bind`: the web UI's RoleBinding from deploy/course/."""
    annotations = {"userland.dev/instructors": INSTRUCTOR, "userland.dev/assistants": ASSISTANT}
    if title:
        annotations["userland.dev/title"] = title
    await kube.merge_patch(NAMESPACES, None, namespace, {"metadata": {
        "labels": {"userland.dev/course": "true"}, "annotations": annotations}})
    if bind:
        (binding,) = [d for d in render_course(namespace) if d["kind"] == "RoleBinding"]
        await kube.create(ROLEBINDINGS, namespace, binding)


async def wait_for_access(web_kube: KubeClient, namespace: str, timeout: float = 10.0) -> None:
    """Until the API server's RBAC cache has the course's RoleBinding (it lags a create a little)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await web_kube.list(USERLANDS, namespace, limit=1)
            return
        except PermanentError as err:
            if err.status != 403 or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def make_template(kube: KubeClient, namespace: str, name: str, *, reclaim: str | None = "Retain",
                        **spec: Any) -> None:
    storage = None if reclaim is None else {"size": "1Gi", "mountPath": "/home/coder",
                                            "reclaimPolicy": reclaim}
    await kube.create(TEMPLATES, namespace, template_body(name, storage=storage, **spec))


@dataclass
class Browserless:
    """A signed-in user's requests to the web UI (what the gateway would forward)."""

    client: Any  # aiohttp TestClient
    login: str
    role: str = "student"

    @property
    def csrf(self) -> str:
        return security.csrf_token(SECRET, self.login, SESSION_ID)

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str]:
        response = await self.client.get(path, headers=headers(self.login, self.role), allow_redirects=False,
                                         **kwargs)
        return response.status, await response.text()

    async def post(self, path: str, data: Any, *, csrf: str | None = "", origin: str | None = PUBLIC,
                   ) -> tuple[int, str]:
        """POST a form; `csrf=""` means this user's valid token, None leaves it out."""
        if isinstance(data, aiohttp.FormData):
            form = data
        else:
            form = aiohttp.FormData()
            for key, value in (data.items() if isinstance(data, dict) else data):
                for item in (value if isinstance(value, list) else [value]):
                    form.add_field(key, item)
        if csrf is not None:
            form.add_field("csrf", csrf or self.csrf)
        response = await self.client.post(path, data=form, allow_redirects=False,
                                          headers=headers(self.login, self.role, origin=origin))
        return response.status, await response.text()


AppFactory = Callable[..., Awaitable[Callable[[str, str], Browserless]]]


def settings(redis_url: str = "redis://127.0.0.1:1/0", **overrides: Any) -> Settings:
    values: dict[str, Any] = {"identity_secret": SECRET, "public_url": PUBLIC, "redis_url": redis_url,
                              "admins": ("root",), "instructors": ()}
    values.update(overrides)
    return Settings(**values)


_ROW = re.compile(r'<tr class="outcome-(\w+)"[^>]*>\s*(?:<td class="line">[^<]*</td>\s*)?'
                  r'<td[^>]*>([^<]*)</td>\s*<td[^>]*>([^<]*)</td>', re.S)
_LINE = re.compile(r'<tr class="outcome-\w+"[^>]*>\s*<td class="line">([^<]*)</td>\s*'
                   r'<td[^>]*>([^<]*)</td>', re.S)


def result_lines(page: str) -> list[tuple[str, str]]:
    """(roster line, login as shown) per row of an add-students results table."""
    return [(line.strip(), login.strip()) for line, login in _LINE.findall(page)]


def outcomes(page: str) -> list[tuple[str, str, str]]:
    """(login, environment, outcome) per row of a results page's table, in order."""
    return [(login.strip(), template.strip(), outcome) for outcome, login, template in _ROW.findall(page)]


def outcome_set(page: str) -> set[str]:
    return {outcome for _, _, outcome in outcomes(page)}
