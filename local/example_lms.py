"""`make run`'s example LMS: an LTI 1.3 platform on loopback with one course that opens Userland.

A newcomer tries the whole LTI flow on their machine: the LMS's course page
(`http://127.0.0.1:<port>/`) has two links, "open Userland as the student" and "as the
instructor"; each is the platform's third-party initiated login to the local gateway's
`/lti/login`, then its authorization endpoint posts a signed id_token to `/lti/launch`, as
Canvas or Moodle would. The platform is the PyPI package `lti1p3platform` (the `local` extra;
the tests' LTI platforms build on the same pieces, tests/support/lti_launch_platform.py).

`userland local` (local/setup.py) starts it before the gateway, writes the `LtiRegistration`
`example-lms` for it in the LTI namespace and links the LMS course to the local course
(`userland.dev/lti-links` on `classroom`, its students getting the demo Template): a Learner's
launch lands in their own environment, the Instructor's on the class dashboard as its
instructor (docs/lti.md).

The issuer is a fixed name, not the platform's address (a port picked afresh each run), so an
LMS user's binding to their Userland login holds across restarts; the platform's key is kept in
the state folder.
"""

from __future__ import annotations

import contextlib
import html
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request, TRequest

from userland.local.ports import free_port
from userland.local.process_tree import SERVER_SHUTDOWN_TIMEOUT
from userland.platform.clients.kube import NAMESPACES, AlreadyExists, KubeClient, Resource
from userland.platform.model import naming
from userland.platform.model.lti import PLURAL
from userland.platform.model.lti_links import ANNOTATION_LINKS, LmsLink, course_links, links_value, with_link

LIS = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
ISSUER = "https://example-lms.localhost"
CLIENT_ID = "userland-local"
DEPLOYMENT_ID = "example-deployment"
REGISTRATION = "example-lms"
CONTEXT_ID = "example-course"
CONTEXT_TITLE = "Introduction to Userland (example LMS course)"
INSTRUCTOR = "prof"


def new_rsa_pem() -> tuple[str, str]:
    """A fresh RSA key pair as (private PEM, public PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return private_pem(key), public_pem(key)


def private_pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def kept_key(path: Path) -> tuple[str, str]:
    """The platform's key pair, kept in `path` (made once, readable by this account only)."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if isinstance(key, rsa.RSAPrivateKey):
            return private_pem(key), public_pem(key)
    except (OSError, ValueError):
        pass
    private, public = new_rsa_pem()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(private)
    return private, public


# -- lti1p3platform's abstract classes, completed for a platform served by aiohttp --

class AioRequest(Request):
    def build_metadata(self, request: Any) -> TRequest:
        return request  # type: ignore[no-any-return]


class Config(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs: Any) -> None:
        self._registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: Any) -> Registration:
        assert self._registration is not None
        return self._registration  # type: ignore[no-any-return]


class Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs: Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> str:
        return url


class Launch(LTIAdvantageMessageLaunchAbstract):
    def render_launch_form(self, launch_data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return launch_data


def launch_request(config: Config, auth_params: Mapping[str, str]) -> Launch:
    """lti1p3platform's launch for the tool's authorization request (its query's parameters)."""
    return Launch(AioRequest({"method": "GET", "get_data": dict(auth_params), "form_data": {}, "headers": {},
                              "content_type": None, "path": "/auth", "json": None}), config)


def auto_post_form(action: str, fields: Mapping[str, str]) -> str:
    """The page an LMS answers its authorization request with: a form that posts itself."""
    inputs = "".join(
        f"<input type='hidden' name='{html.escape(k)}' value='{html.escape(v)}'>" for k, v in fields.items()
    )
    return (
        f"<!doctype html><html><body><form id='f' method='post' action='{html.escape(action)}'>{inputs}"
        "<noscript><button>Continue</button></noscript></form>"
        "<script>document.getElementById('f').submit();</script></body></html>"
    )


# -- the example platform --

@dataclass(frozen=True)
class Person:
    user_id: str
    name: str
    email: str
    role: str  # the LIS role's name: Learner, Instructor


def people(student: str) -> dict[str, Person]:
    """Who the example course has: one student (a make-run student, so their environment is
    there already) and its instructor."""
    return {"student": Person(f"lms-{student}", student.title(), f"{student}@example.edu", "Learner"),
            "instructor": Person(f"lms-{INSTRUCTOR}", "Professor Example", f"{INSTRUCTOR}@example.edu",
                                 "Instructor")}


class ExampleLms:
    """The platform. `tool_url`: the local gateway's public origin."""

    def __init__(self, tool_url: str, key: tuple[str, str], members: Mapping[str, Person]) -> None:
        self.tool_url = tool_url.rstrip("/")
        self.private_pem, self.public_pem = key
        self.members = dict(members)
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def registration(self) -> Registration:
        reg = Registration()
        reg.set_iss(ISSUER).set_client_id(CLIENT_ID).set_deployment_id(DEPLOYMENT_ID)
        reg.set_launch_url(self.tool_url + "/lti/launch").set_oidc_login_url(self.tool_url + "/lti/login")
        reg.set_platform_public_key(self.public_pem).set_platform_private_key(self.private_pem)
        return reg

    def spec(self) -> dict[str, Any]:
        """The LtiRegistration spec an admin would write for this platform."""
        return {"issuer": ISSUER, "clientId": CLIENT_ID, "deploymentIds": [DEPLOYMENT_ID],
                "authLoginUrl": self.url + "/auth", "authTokenUrl": self.url + "/token",
                "keySetUrl": self.url + "/jwks"}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self.course_page)
        app.router.add_get("/start/{who}", self.start_login)
        app.router.add_get("/auth", self.auth)
        app.router.add_get("/jwks", self.jwks)
        return app

    async def start(self, port: int) -> None:
        self.runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                                    shutdown_timeout=SERVER_SHUTDOWN_TIMEOUT)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.port = port

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # -- routes

    async def course_page(self, _: web.Request) -> web.Response:
        rows = "".join(
            f"<li><a href='/start/{quote(who)}'>Open Userland as {html.escape(p.name)}</a> "
            f"(the course's {p.role.lower()}; Userland login {html.escape(p.email.split('@')[0])})</li>"
            for who, p in self.members.items())
        body = (f"<!doctype html><html><head><meta charset='utf-8'><title>Example LMS</title></head><body>"
                f"<h1>{html.escape(CONTEXT_TITLE)}</h1>"
                "<p>An LTI 1.3 platform on this machine, as Canvas or Moodle would be, with Userland "
                "registered in it (docs/lti.md). Each link below is the LMS course's link to Userland: "
                "the student lands in their own environment, the instructor on the class dashboard.</p>"
                f"<ul>{rows}</ul></body></html>")
        return web.Response(text=body, content_type="text/html")

    def login_initiation_url(self, who: str) -> str:
        person = self.members[who]
        login = Login(None, Config(registration=self.registration()))
        login.set_lti_message_hint(hint=who)
        return login.initiate_login(person.user_id)  # type: ignore[no-any-return]

    async def start_login(self, request: web.Request) -> web.Response:
        who = request.match_info["who"]
        if who not in self.members:
            raise web.HTTPNotFound(text="No such member of this course.")
        raise web.HTTPFound(self.login_initiation_url(who))

    def id_token(self, auth_params: Mapping[str, str]) -> str:
        person = self.members[auth_params["lti_message_hint"]]
        config = Config(registration=self.registration())
        launch = launch_request(config, auth_params)
        launch.set_user_data(person.user_id, [LIS + person.role], full_name=person.name,
                             email_address=person.email)
        launch.set_resource_link_claim("example-link")
        launch.set_launch_context_claim(CONTEXT_ID, context_title=CONTEXT_TITLE)
        launch._registration = config.get_registration()
        launch.validate_preflight_response(launch.get_preflight_response())
        return str(launch.generate_launch_request()["id_token"])

    async def auth(self, request: web.Request) -> web.Response:
        params = dict(request.query)
        if params.get("client_id") != CLIENT_ID or params.get("lti_message_hint") not in self.members:
            return web.Response(status=400, text="unknown client or launch")
        if not params.get("redirect_uri", "").startswith(self.tool_url + "/"):
            return web.Response(status=400, text="redirect_uri is not the tool's")
        token = self.id_token(params)
        return web.Response(text=auto_post_form(params["redirect_uri"], {"id_token": token,
                                                                          "state": params["state"]}),
                            content_type="text/html")

    async def jwks(self, _: web.Request) -> web.Response:
        return web.json_response(Config(registration=self.registration()).get_jwks())


# -- its registration in the local control plane, and the link to the local course --

LTI_NAMESPACE = "userland-system"
LTI_REGISTRATIONS = Resource(naming.GROUP, naming.VERSION, PLURAL, "LtiRegistration")


async def register(kube: KubeClient, lms: ExampleLms, course: str, template: str) -> None:
    """The LtiRegistration for `lms` (its URLs as of this run) in LTI_NAMESPACE, and its course
    linked to `course` (students get `template`), as an admin and the instructor's first launch
    would make them; what is there already is brought up to date, other links are kept."""
    with contextlib.suppress(AlreadyExists):
        await kube.create(NAMESPACES, None, {"metadata": {"name": LTI_NAMESPACE}})
    body = {"apiVersion": naming.API_VERSION, "kind": "LtiRegistration",
            "metadata": {"name": REGISTRATION}, "spec": lms.spec()}
    try:
        await kube.create(LTI_REGISTRATIONS, LTI_NAMESPACE, body)
    except AlreadyExists:
        await kube.merge_patch(LTI_REGISTRATIONS, LTI_NAMESPACE, REGISTRATION, {"spec": lms.spec()})
    links = course_links(await kube.get(NAMESPACES, None, course))
    link = LmsLink(REGISTRATION, CONTEXT_ID, template, CONTEXT_TITLE)
    updated = with_link(links, link)
    if updated != links:
        await kube.merge_patch(NAMESPACES, None, course,
                               {"metadata": {"annotations": {ANNOTATION_LINKS: links_value(updated)}}})


async def start_for(kube: KubeClient, state_dir: Path, tool_url: str, student: str, course: str,
                    template: str) -> ExampleLms:
    """`userland local`'s example LMS: served on a free loopback port, registered and linked."""
    lms = ExampleLms(tool_url, kept_key(state_dir / "example-lms-key.pem"), people(student))
    await lms.start(free_port())
    try:
        await register(kube, lms, course, template)
    except BaseException:
        await lms.close()
        raise
    return lms
