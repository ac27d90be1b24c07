"""A real LTI 1.3 platform (the LMS side) for the launch tests: the PyPI package
`lti1p3platform` (its registration, OIDC login initiation, launch message and RS256 signing with
its own JWKS), served by a small aiohttp app on 127.0.0.1 with a real RSA key made per test.

Routes:
- `GET /jwks`: the platform's key set;
- `GET /start/{launch}`: a user clicks a link in the course: the platform's OIDC login
  initiation (a redirect to the tool's `/lti/login` with iss, login_hint, target_link_uri,
  lti_message_hint = the launch's id, client_id, lti_deployment_id);
- `GET /auth`: the platform's OIDC authorization endpoint: checks the tool's request with
  lti1p3platform (client id, nonce, state, redirect_uri) and answers the auto-submitting form
  that posts `id_token` and `state` to the tool's redirect URI, as an LMS does;
- `GET /storage`: a page that plays the platform's side of LTI Platform Storage
  (`lti.put_data` / `lti.get_data` answered by postMessage) and frames a launch (browser tests);
- `POST /deep-link-return`: the `deep_link_return_url` of a deep-linking launch: the tool's
  `LtiDeepLinkingResponse` checked by lti1p3platform (`validate_deeplinking_resp`: the tool's
  RS256 signature against its key set, the message type, the item types), then what the library
  leaves out (Deep Linking 2.0): `aud` the platform's issuer, `iss` the client id, the deployment,
  `data` echoed, `exp`. Accepted answers are kept in `deep_links` (their claims).

What each launch carries (user, roles, context, message type) is a `LaunchSpec` the test
registers; `tamper` lets an attack test change the claims, `signer` sign them another way.
"""

from __future__ import annotations

import asyncio
import html
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from aiohttp.test_utils import TestServer
from lti1p3platform.registration import Registration

# lti1p3platform's pieces completed for aiohttp, shared with `make run`'s example LMS.
from userland.local.example_lms import Config as _Config
from userland.local.example_lms import Login as _Login
from userland.local.example_lms import auto_post_form, launch_request, new_rsa_pem

LIS = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
LTI_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
DL_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/"
DL_SETTINGS = DL_CLAIM + "deep_linking_settings"
LEARNER = LIS + "Learner"
INSTRUCTOR = LIS + "Instructor"
TEACHING_ASSISTANT = LIS + "TeachingAssistant"


@dataclass
class LaunchSpec:
    user_id: str
    roles: list[str]
    email: str = ""
    name: str = ""
    context_id: str = "course-1"
    context_title: str = "Databases 101"
    resource_link_id: str = "link-1"
    deep_linking: bool = False
    deep_link_data: str = "platform-opaque-data"  # the settings' opaque `data` (a string, as the spec says)
    custom: dict[str, str] = field(default_factory=dict)
    tamper: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    signer: Callable[[dict[str, Any]], str] | None = None


class LtiTestPlatform:
    """The platform. `tool_url`: the tool's public origin (the gateway's public URL)."""

    def __init__(
        self,
        tool_url: str,
        *,
        client_id: str = "userland-tool",
        deployment_id: str = "deployment-1",
        issuer: str | None = None,
    ) -> None:
        self.tool_url = tool_url.rstrip("/")
        self.client_id = client_id
        self.deployment_id = deployment_id
        self.private_pem, self.public_pem = new_rsa_pem()
        self.launches: dict[str, LaunchSpec] = {}
        self.server: TestServer | None = None
        self._issuer = issuer
        self.issued: list[dict[str, Any]] = []  # every id_token's claims, as signed
        self.registered: list[dict[str, Any]] = []  # what Userland asked to register (Dynamic Registration)
        self.deep_links: list[dict[str, Any]] = []  # the claims of each deep-linking answer taken
        # The tool's key set for checking its answers: set by the test (read from the tool's
        # /lti/jwks); None: fetched from the tool's /lti/jwks by the library.
        self.tool_jwks: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def issuer(self) -> str:
        return self._issuer or self.url

    def registration(self, deep_link: bool = False) -> Registration:
        reg = Registration()
        reg.set_iss(self.issuer).set_client_id(self.client_id).set_deployment_id(self.deployment_id)
        reg.set_launch_url(self.tool_url + "/lti/launch").set_oidc_login_url(self.tool_url + "/lti/login")
        reg.set_deeplink_launch_url(self.tool_url + "/lti/launch")
        reg.set_platform_public_key(self.public_pem).set_platform_private_key(self.private_pem)
        return reg

    def spec(self) -> dict[str, Any]:
        """The LtiRegistration spec an admin would write for this platform."""
        return {
            "issuer": self.issuer,
            "clientId": self.client_id,
            "deploymentIds": [self.deployment_id],
            "authLoginUrl": self.url + "/auth",
            "authTokenUrl": self.url + "/token",
            "keySetUrl": self.url + "/jwks",
        }

    def add_launch(self, spec: LaunchSpec) -> str:
        launch_id = secrets.token_hex(6)
        self.launches[launch_id] = spec
        return launch_id

    def start_url(self, launch_id: str, **extra: str) -> str:
        return f"{self.url}/start/{launch_id}" + (("?" + urlencode(extra)) if extra else "")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/jwks", self.jwks)
        app.router.add_get("/start/{launch}", self.start_route)
        app.router.add_get("/auth", self.auth)
        app.router.add_get("/storage", self.storage_page)
        app.router.add_post("/deep-link-return", self.deep_link_return)
        app.router.add_get("/.well-known/openid-configuration", self.openid_configuration)
        app.router.add_post("/register", self.dynamic_register)
        return app

    # -- LTI Dynamic Registration, the platform's side (lti1p3platform has none: plain JSON) --

    registration_token = "reg-token-1"

    async def openid_configuration(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": self.url + "/auth",
                "token_endpoint": self.url + "/token",
                "jwks_uri": self.url + "/jwks",
                "registration_endpoint": self.url + "/register",
                "https://purl.imsglobal.org/spec/lti-platform-configuration": {"product_family_code": "test"},
            }
        )

    async def dynamic_register(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.registration_token}":
            return web.json_response({"error": "invalid token"}, status=401)
        body = await request.json()
        self.registered.append(body)
        return web.json_response(
            {
                **body,
                "client_id": self.client_id,
                "https://purl.imsglobal.org/spec/lti-tool-configuration": {
                    **body["https://purl.imsglobal.org/spec/lti-tool-configuration"],
                    "deployment_id": self.deployment_id,
                },
            }
        )

    async def start(self) -> LtiTestPlatform:
        self.server = TestServer(self.app(), host="127.0.0.1")
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    # -- routes --

    async def jwks(self, _: web.Request) -> web.Response:
        config = _Config(registration=self.registration())
        return web.json_response(config.get_jwks())

    def login_initiation_url(self, launch_id: str, **extra: str) -> str:
        """The platform's third-party initiated login: where a click on the course's link goes."""
        spec = self.launches[launch_id]
        config = _Config(registration=self.registration())
        login = _Login(None, config)
        login.set_lti_message_hint(hint=launch_id)
        url = login.initiate_login(spec.user_id)
        return url + ("&" + urlencode(extra) if extra else "")

    async def start_route(self, request: web.Request) -> web.Response:
        return web.Response(
            status=302,
            headers={
                "Location": self.login_initiation_url(request.match_info["launch"], **dict(request.query))
            },
        )

    def id_token(self, auth_params: dict[str, str]) -> tuple[str, dict[str, Any]]:
        """The id_token lti1p3platform makes for the tool's authorization request, signed (or
        tampered with and signed another way, as the launch's spec says), and its claims."""
        spec = self.launches[auth_params.get("lti_message_hint", "")]
        config = _Config(registration=self.registration())
        launch = launch_request(config, auth_params)
        launch.set_user_data(
            spec.user_id, spec.roles, full_name=spec.name or None, email_address=spec.email or None
        )
        launch.set_resource_link_claim(spec.resource_link_id)
        launch.set_launch_context_claim(spec.context_id, context_title=spec.context_title)
        if spec.custom:
            launch.set_custom_parameters_claim(spec.custom)
        if spec.deep_linking:
            launch.set_dl(self.url + "/deep-link-return", title="Add Userland")
            settings = launch._deep_linking_launch_data[DL_SETTINGS]
            settings["accept_multiple"] = False  # a module item is one link
            if spec.deep_link_data:
                settings["data"] = spec.deep_link_data
        launch._registration = config.get_registration()
        launch.validate_preflight_response(launch.get_preflight_response())
        data = launch.generate_launch_request()
        token = data["id_token"]
        claims = jwt.decode(token, self.public_pem, algorithms=["RS256"], options={"verify_aud": False})
        if spec.tamper is not None or spec.signer is not None:
            claims = spec.tamper(dict(claims)) if spec.tamper is not None else claims
            token = spec.signer(claims) if spec.signer is not None else self.sign(claims)
        self.issued.append(claims)
        return token, claims

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None) -> str:
        """`claims` signed with the platform's own key (RS256, its kid)."""
        kid = self.registration().get_kid()
        return jwt.encode(
            claims, self.private_pem, algorithm="RS256", headers={"kid": kid, **(headers or {})}
        )

    async def auth(self, request: web.Request) -> web.Response:
        params = dict(request.query)
        if params.get("client_id") != self.client_id or params.get("lti_message_hint") not in self.launches:
            return web.Response(status=400, text="unknown client or launch")
        if not params.get("redirect_uri", "").startswith(self.tool_url + "/"):
            return web.Response(status=400, text="redirect_uri is not the tool's")
        token, _ = self.id_token(params)
        return web.Response(
            text=auto_post_form(params["redirect_uri"], {"id_token": token, "state": params["state"]}),
            content_type="text/html",
        )

    async def deep_link_return(self, request: web.Request) -> web.Response:
        token = str((await request.post()).get("JWT", ""))
        registration = self.registration()
        if self.tool_jwks is not None:
            registration.set_tool_key_set(self.tool_jwks)
        else:
            registration.set_tool_key_set_url(self.tool_url + "/lti/jwks")
        config = _Config(registration=registration)
        try:
            await asyncio.to_thread(config.validate_deeplinking_resp, {"JWT": token})
        except Exception as err:  # the library raises several kinds
            return web.Response(
                status=400, text=f"deep linking response refused: {type(err).__name__}: {err}"
            )
        claims = jwt.decode(token, options={"verify_signature": False})
        problem = (
            "aud must be the platform's issuer" if claims.get("aud") not in (self.issuer, [self.issuer])
            else "iss must be the client id" if claims.get("iss") != self.client_id
            else "unknown deployment id" if claims.get(LTI_CLAIM + "deployment_id") != self.deployment_id
            else "data not echoed" if claims.get(DL_CLAIM + "data") != "platform-opaque-data"
            else "expired" if not isinstance(claims.get("exp"), int) or claims["exp"] < now()
            else ""
        )
        if problem:
            return web.Response(status=400, text=f"deep linking response refused: {problem}")
        self.deep_links.append(claims)
        titles = ", ".join(str(item.get("title")) for item in claims.get(DL_CLAIM + "content_items") or [])
        return web.Response(
            text=f"<!doctype html><html><head><title>Module</title></head><body><h1>Added to the module</h1>"
            f"<p id='added'>{html.escape(titles)}</p></body></html>",
            content_type="text/html",
        )

    async def storage_page(self, request: web.Request) -> web.Response:
        """A course page: frames the launch (`?launch=<id>`) and answers Platform Storage messages
        when `?storage=1`."""
        launch_id = request.query["launch"]
        storage = request.query.get("storage") == "1"
        start = self.login_initiation_url(launch_id, **({"lti_storage_target": "_parent"} if storage else {}))
        script = STORAGE_SCRIPT if storage else ""
        body = (
            f"<!doctype html><html><head><title>Course</title></head><body><h1>Course page</h1>"
            f"<iframe id='tool' name='tool' src='{html.escape(start)}' width='900' height='600'></iframe>"
            f"<script>{script}</script></body></html>"
        )
        return web.Response(text=body, content_type="text/html")


# The platform's side of LTI Platform Storage: answers put_data/get_data from its frames.
STORAGE_SCRIPT = """
var store = {};
window.addEventListener('message', function (event) {
  var m = event.data;
  if (!m || typeof m !== 'object') { return; }
  if (m.subject === 'lti.put_data') {
    store[event.origin + '|' + m.key] = m.value;
    event.source.postMessage({subject: 'lti.put_data.response', message_id: m.message_id, key: m.key,
                              value: m.value}, event.origin);
  } else if (m.subject === 'lti.get_data') {
    event.source.postMessage({subject: 'lti.get_data.response', message_id: m.message_id, key: m.key,
                              value: store[event.origin + '|' + m.key]}, event.origin);
  }
});
"""


_INPUT = re.compile(r"<input type='hidden' name='([^']*)' value='([^']*)'>")
_ACTION = re.compile(r"action='([^']*)'")


def read_form(page: str) -> tuple[str, dict[str, str]]:
    """The action and fields of an auto-post form (what a browser would submit)."""
    action = _ACTION.search(page)
    assert action is not None, page[:500]
    return html.unescape(action.group(1)), {
        html.unescape(k): html.unescape(v) for k, v in _INPUT.findall(page)
    }


def now() -> int:
    return int(time.time())
