"""Driving an LTI launch through the real gateway, as a browser would, against the real test
platform (tests/support/lti_launch_platform.py): the platform's login initiation, the gateway's
/lti/login, the platform's authorization endpoint, its auto-posted form to /lti/launch, and
/lti/continue. Each step is a method, so an attack test can stop or change any of them.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support.lti_launch_platform import LtiTestPlatform, read_form
from userland.platform.clients.kube import KubeClient, Resource
from userland.platform.model import naming
from userland.platform.model.settings import Settings
from userland.web.app import create_app

WebClient = TestClient[web.Request, web.Application]

LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, "ltiregistrations", "LtiRegistration")
HOST = {"Host": "userland.test"}
_DATA = re.compile(r'data-([a-z-]+)="([^"]*)"')


def page_data(text: str) -> dict[str, str]:
    """The `data-` attributes of an LTI step page (what its script acts on)."""
    return {k: html.unescape(v) for k, v in _DATA.findall(text)}


@dataclass
class LoginStep:
    response_status: int
    location: str
    cookies: dict[str, str]
    text: str = ""

    @property
    def auth_params(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.location).query))


@dataclass
class LtiFlow:
    gateway: TestClient[web.Request, web.Application]
    platform: LtiTestPlatform
    http: aiohttp.ClientSession
    seen: list[Any] = field(default_factory=list)

    async def login(self, launch_id: str, *, method: str = "GET", **extra: str) -> LoginStep:
        """The platform's login initiation, sent to the gateway's /lti/login."""
        url = self.platform.login_initiation_url(launch_id, **extra)
        parts = urlsplit(url)
        target = f"{parts.path}?{parts.query}"
        if method == "GET":
            resp = await self.gateway.get(target, headers=HOST, allow_redirects=False)
        else:
            resp = await self.gateway.post(
                parts.path,
                data=dict(parse_qsl(parts.query)),
                headers={**HOST, "Origin": self.platform.url},
                allow_redirects=False,
            )
        cookies = {m.key: m.value for m in resp.cookies.values()}
        return LoginStep(resp.status, resp.headers.get("Location", ""), cookies, await resp.text())

    async def authorize(self, location: str) -> dict[str, str]:
        """The platform's authorization endpoint: the fields its auto-posted form carries."""
        async with self.http.get(location) as resp:
            assert resp.status == 200, await resp.text()
            action, fields = read_form(await resp.text())
        assert action == "http://userland.test/lti/launch"
        return fields

    async def post_launch(
        self, fields: dict[str, str], cookies: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """The platform's form post to /lti/launch, from the platform's site."""
        cookie = "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())
        headers = {**HOST, "Origin": self.platform.url, "Sec-Fetch-Site": "cross-site"}
        if cookie:
            headers["Cookie"] = cookie
        resp = await self.gateway.post("/lti/launch", data=fields, headers=headers, allow_redirects=False)
        return resp.status, await resp.text()

    async def continue_(self, url: str) -> aiohttp.ClientResponse:
        return await self.gateway.get(url, headers=HOST, allow_redirects=False)

    async def launch(self, launch_id: str) -> tuple[str, str]:
        """A whole launch with the cookie; returns the session cookie and where it sends the user."""
        step = await self.login(launch_id)
        assert step.response_status == 302, step.text
        fields = await self.authorize(step.location)
        status, text = await self.post_launch(fields, step.cookies)
        assert status == 200, text
        data = page_data(text)
        assert data["mode"] == "continue", data
        resp = await self.continue_(data["url"])
        assert resp.status == 302, await resp.text()
        session = next(m.value for m in resp.cookies.values() if m.key == "userland_session")
        return session, resp.headers["Location"]


async def started_web_ui(aiohttp_client: Callable[[web.Application], Awaitable[WebClient]], kube: KubeClient,
                         conn: redis.asyncio.Redis, settings: Settings) -> WebClient:
    """The real web UI (`create_app`, every middleware) on `kube`, once it answers /healthz."""
    client = await aiohttp_client(create_app(settings, kube=kube, redis_client=conn))
    deadline = time.monotonic() + 20
    while (await client.get("/healthz")).status != 200:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    return client


async def register(kube: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    await kube.create(
        LTI_REGISTRATIONS,
        namespace,
        {
            "apiVersion": naming.API_VERSION,
            "kind": "LtiRegistration",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


async def ready_condition(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    obj = await kube.get(LTI_REGISTRATIONS, namespace, name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})
