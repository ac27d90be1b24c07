"""What the LTI launch's routes share (auth/lti.py, auth/lti_continue.py): their paths, the
`LtiContext` (settings, the Redis store, the registrations' watch and key sets, the tool's keys,
and the gateway's routing data for landing), its lifetime beside the gateway, the names of the
browser secret's cookie and Platform Storage key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from userland.auth import lti_pages
from userland.auth.lti_registry import KeySets, Registrations
from userland.auth.lti_store import LtiStore
from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import NAMESPACES, KubeClient, KubeError
from userland.platform.clients.lti_keys import ensure_keys, read_keys
from userland.platform.model import naming
from userland.platform.model.keyspace import digest
from userland.platform.model.lti_keys import ToolKey
from userland.platform.model.settings import Settings

log = logging.getLogger(__name__)

LOGIN_PATH = "/lti/login"
LAUNCH_PATH = "/lti/launch"
CONTINUE_PATH = "/lti/continue"
JWKS_PATH = "/lti/jwks"
STATE_COOKIE_PREFIX = "userland_lti_"
# The login's parameters kept to start it again in a new window (never lti_storage_target:
# the new window is top-level, where the cookie works).
RESTART_PARAMS = (
    "iss",
    "login_hint",
    "target_link_uri",
    "lti_message_hint",
    "client_id",
    "lti_deployment_id",
)
KEYS_RELOAD_SECONDS = 300.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)
TRY_AGAIN = "Please open the link in your course again."


@dataclass(frozen=True)
class LtiTarget:
    """A Template an LMS context is linked to (its course is the Template's namespace)."""

    namespace: str
    template: str
    host: str


def _no_targets(_registration: str, _context: str) -> list[LtiTarget]:
    return []


async def _no_environment(_target: LtiTarget, _login: str) -> bool:
    return False


@dataclass
class LtiContext:
    settings: Settings
    store: LtiStore
    # The gateway's routing data (proxy/lti_courses.py): the Templates linked to an LMS
    # context, and a Learner's environment made when missing.
    targets: Callable[[str, str], list[LtiTarget]] = _no_targets
    ensure_environment: Callable[[LtiTarget, str], Awaitable[bool]] = _no_environment
    registrations: Registrations | None = None
    # The course namespaces (their LMS links, platform/model/lti_links.py), watched in run().
    courses: Informer | None = None
    key_sets: KeySets | None = None
    tool_keys: list[ToolKey] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # Launch outcomes by reason (for logs and tests; plain counts).
    outcomes: Counter[str] = field(default_factory=Counter)

    async def run(self, kube: KubeClient) -> None:
        """Watch the registrations, load (or make) the tool's keys, until cancelled."""
        namespace = self.settings.lti_namespace
        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
            self.key_sets = KeySets(http)
            self.registrations = Registrations(kube, namespace, self.key_sets)
            watch = asyncio.create_task(self.registrations.run())
            self.courses = Informer(kube, NAMESPACES, label_selector=f"{naming.LABEL_COURSE}=true",
                                    transform=_trim_namespace)
            courses = asyncio.create_task(self.courses.run())
            try:
                while not self.tool_keys:
                    try:
                        self.tool_keys = await ensure_keys(kube, namespace)
                    except KubeError as exc:
                        log.warning(
                            "could not read the LTI tool keys",
                            extra={"event": "lti.keys_unavailable", "error": str(exc)[:200]},
                        )
                        await asyncio.sleep(5)
                await self.registrations.informer.wait_synced()
                await self.courses.wait_synced()
                self.ready.set()
                log.info(
                    "LTI ready",
                    extra={
                        "event": "lti.ready",
                        "namespace": namespace,
                        "registrations": len(self.registrations.all()),
                    },
                )
                while True:
                    await asyncio.sleep(KEYS_RELOAD_SECONDS)
                    with contextlib.suppress(KubeError):
                        self.tool_keys = await read_keys(kube, namespace) or self.tool_keys
            finally:
                for task in (watch, courses):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task


def _trim_namespace(obj: dict[str, object]) -> dict[str, object]:
    """Only what landing reads of a course namespace: its name and annotations."""
    metadata = obj.get("metadata")
    md = metadata if isinstance(metadata, dict) else {}
    return {"metadata": {k: md[k] for k in ("name", "resourceVersion", "annotations", "deletionTimestamp")
                         if k in md}}


LTI = web.AppKey("userland_lti", LtiContext)


def lti_context(request: web.Request) -> LtiContext:
    return request.config_dict[LTI]


def state_cookie(state: str) -> str:
    """The browser secret's cookie for one pending launch (several tabs may launch at once)."""
    return STATE_COOKIE_PREFIX + digest(state)[:16]


def storage_key(state: str) -> str:
    return "userland-lti-" + digest(state)[:16]


def starting() -> web.Response:
    response = lti_pages.refusal(
        503, "Starting", "Userland's LMS sign-in is starting. Please try again in a moment."
    )
    response.headers["Retry-After"] = "5"
    return response


