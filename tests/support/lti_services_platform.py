"""A real LTI 1.3 platform (the LMS side) for the services tests: lti1p3platform over aiohttp.

What lti1p3platform 0.1.8 (PyPI, MIT) provides and is used as is:
- the platform's registration, its RS256 key and JWKS (`Registration`, `get_jwks`);
- the token endpoint's logic (`LTI1P3PlatformConfAbstract.get_access_token`): it fetches the
  tool's JWKS over HTTP (with `requests`, so it runs in a thread here), checks the client
  assertion's RS256 signature and `exp`, keeps the known scopes, and signs an access token;
- the services' request checks (`authenticate`: a bearer token signed by the platform, of its
  issuer, unexpired, with one of the service's scopes) and their handlers
  (`NamesRoleProvisioningService.handle_get_members`, `AssignmentsGradesService.handle_*`);
- the deep-linking response check (`validate_deeplinking_resp`: the tool's signature, the
  message type, the content item types).

Where it falls short of the specs, this server adds what a real LMS does, following the IMS
texts (Security Framework 1.0 section 4.1; NRPS 2.0; AGS 2.0; Deep Linking 2.0):
- the client assertion's `iss` and `sub` must be the client id, its `aud` the token URL, and its
  `jti` is single-use (the library checks none of these: it decodes with `verify_aud: False`);
  errors are RFC 6749 JSON (`invalid_client`, `invalid_grant`, `invalid_scope`);
- each AGS operation needs its own scope (the library accepts any AGS scope for any call);
- NRPS and AGS pages are announced in a `Link: <...>; rel="next"` header (the library puts a
  `next` field in the body, and only when the tool sends `limit`): the platform picks a page
  size when the tool gives none, as Canvas does;
- line item containers are JSON arrays (the library returns its page dict), filtered by
  `resource_id`, `resource_link_id` and `tag`;
- a Score is checked (media type, `userId`, `timestamp`, the progress values, `scoreGiven`
  needs `scoreMaximum`) and one older than the last one kept for that user is refused (409);
- the deep-linking response's `aud` must be the platform's issuer, its `iss` the client id,
  its deployment id known, and `data` echoed.

Faults a test switches on (`faults`): a slow or garbage token endpoint, a page loop (the last
page's `next` points back to the first), a `next` to another host, AGS down (503) for the next
N requests. Everything the tool sent is recorded for the tests to read.
"""

from __future__ import annotations

import asyncio
import json
import time
import typing as t
from dataclasses import dataclass, field
from datetime import datetime

import jwt as pyjwt
from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc.jwk import RSAKey
from lti1p3platform.exceptions import LineItemNotFoundException, LtiException
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.membership import Context
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request, TRequest
from lti1p3platform.response import Response as _LibResponse
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import (
    AssignmentsGradesService,
    NamesRoleProvisioningService,
    TPage,
)

from userland.platform.model.lti_services_keys import ToolKey

LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
ACTIVITY = {"Initialized", "Started", "InProgress", "Submitted", "Completed"}
GRADING = {"FullyGraded", "Pending", "PendingManual", "Failed", "NotReady"}
SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_LINEITEM_RO = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCOPE_RESULT = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"


def new_tool_key(kid: str = "tool-1") -> ToolKey:
    return ToolKey(kid=kid, private_pem=RSAKey.generate_key(2048).as_pem(private=True).decode())


@dataclass
class Faults:
    token_delay: float = 0.0  # seconds before the token endpoint answers
    token_garbage: bytes | None = None  # the token endpoint's whole answer (HTTP 200), if set
    page_loop: bool = False  # the last roster page's next points back to the first (the bare URL)
    next_elsewhere: str = ""  # the first roster page's next points to this URL
    ags_down: int = 0  # the next N AGS requests get 503


@dataclass
class LineItem:
    id: str
    body: dict[str, t.Any]
    scores: dict[str, dict[str, t.Any]] = field(default_factory=dict)  # userId -> last Score


class _Req(Request):
    def build_metadata(self, request: t.Any) -> TRequest:
        return t.cast(TRequest, request)


def _tread(method: str, query: t.Mapping[str, str], headers: t.Mapping[str, str], body: t.Any) -> _Req:
    data: dict[str, t.Any] = dict(query)
    for name in ("page", "limit"):
        if name in data:
            data[name] = int(data[name])
    return _Req(
        {
            "method": method,
            "form_data": {},
            "get_data": data,
            "headers": dict(headers),
            "content_type": headers.get("Content-Type"),
            "path": "",
            "json": body,
        }
    )


class Platform(LTI1P3PlatformConfAbstract):
    """The LMS: one registration (one tool), its contexts' rosters and line items."""

    def init_platform_config(self, **kwargs: t.Any) -> None:
        pass

    def get_registration_by_params(self, **kwargs: t.Any) -> Registration:
        raise NotImplementedError  # set in LtiServicesPlatform.start


class _Nrps(NamesRoleProvisioningService):
    def __init__(self, request: Request, lms: LtiServicesPlatform, context_id: str) -> None:
        super().__init__(request, lms.platform, lms.memberships_url(context_id))
        self.lms, self.context_id = lms, context_id

    def get_member_data_page(
        self,
        page: int = 1,
        limit: int | None = None,
        role: str | None = None,
        since: str | None = None,
        **_: t.Any,
    ) -> TPage:
        members = self.lms.rosters.get(self.context_id, [])
        if role:
            members = [m for m in members if any(r.endswith(role) for r in m["roles"])]
        size = limit or len(members) or 1
        start = (page - 1) * size
        return {
            "content": [dict(m) for m in members[start : start + size]],
            "has_next": start + size < len(members),
        }

    def get_context_by_id(self) -> Context:
        return Context(id=self.context_id, label=self.context_id.upper(), title=f"Course {self.context_id}")


class _Ags(AssignmentsGradesService):
    def __init__(self, request: Request, lms: LtiServicesPlatform, context_id: str) -> None:
        super().__init__(request, lms.platform, lms.lineitems_url(context_id))
        self.lms, self.context_id = lms, context_id

    def _items(self) -> dict[str, LineItem]:
        return self.lms.line_items.setdefault(self.context_id, {})

    def find_lineitems(
        self,
        page: int = 1,
        limit: int | None = None,
        line_item_id: str | None = None,
        resource_link_id: str | None = None,
        resource_id: str | None = None,
        tag: str | None = None,
        **_: t.Any,
    ) -> TPage:
        found = [
            item.body
            for item in self._items().values()
            if (resource_id is None or item.body.get("resourceId") == resource_id)
            and (resource_link_id is None or item.body.get("resourceLinkId") == resource_link_id)
            and (tag is None or item.body.get("tag") == tag)
        ]
        size = limit or self.lms.page_size or len(found) or 1
        start = (page - 1) * size
        return {"content": found[start : start + size], "has_next": start + size < len(found)}

    def find_lineitem(self, line_item_id: str) -> t.Any:
        if line_item_id not in self._items():
            raise LineItemNotFoundException(line_item_id)
        return self._items()[line_item_id].body

    def create_lineitem(self, creation_data: t.Any) -> t.Any:
        number = sum(len(items) for items in self.lms.line_items.values()) + 1
        item_id = f"{self.lms.lineitems_url(self.context_id)}/{number}"
        body = {**creation_data, "id": item_id}
        self._items()[str(number)] = LineItem(id=item_id, body=body)
        self.lms.created_line_items.append(body)
        return body

    def update_lineitem(self, update_data: t.Any) -> t.Any:
        item = self._items()[update_data["id"]]
        item.body.update({k: v for k, v in update_data.items() if k != "id"})
        return item.body

    def delete_lineitem(self, line_item_id: str) -> None:
        self._items().pop(line_item_id)

    def update_score(self, line_item_id: str, score: t.Any) -> UpdateScoreStatus:
        item = self._items().get(line_item_id)
        if item is None:
            raise LineItemNotFoundException(line_item_id)
        previous = item.scores.get(score["userId"])
        if previous is not None and _when(previous["timestamp"]) > _when(score["timestamp"]):
            return UpdateScoreStatus.OLD_TIMESTAMP
        item.scores[score["userId"]] = score
        return UpdateScoreStatus.SUCCESS if previous else UpdateScoreStatus.CREATED

    def get_results(
        self,
        line_item_id: str,
        page: int = 1,
        limit: int | None = None,
        user_id: str | None = None,
        **_: t.Any,
    ) -> TPage:
        item = self._items().get(line_item_id)
        if item is None:
            raise LineItemNotFoundException(line_item_id)
        results = [
            {
                "id": f"{item.id}/results/{user}",
                "userId": user,
                "resultScore": s.get("scoreGiven"),
                "resultMaximum": s.get("scoreMaximum"),
                "comment": s.get("comment"),
                "scoreOf": item.id,
            }
            for user, s in item.scores.items()
            if user_id is None or user == user_id
        ]
        return {"content": results, "has_next": False}


def _run(service: t.Any, handler: t.Callable[..., t.Any], **kwargs: t.Any) -> t.Any:
    """A library handler's Response; a token it cannot verify is a 401, as a real LMS answers
    (the library lets PyJWT's errors through, which would be a 500)."""
    try:
        return service.handle_resp(handler, **kwargs)
    except (pyjwt.PyJWTError, LtiException) as err:
        return _LibResponse(None, 401, f"invalid token: {type(err).__name__}")


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _json(
    body: t.Any, status: int = 200, content_type: str = "application/json", link: str = ""
) -> web.Response:
    headers = {"Link": link} if link else {}
    return web.Response(
        body=json.dumps(body).encode(), status=status, content_type=content_type, headers=headers
    )


def _oauth_error(error: str, description: str, status: int = 400) -> web.Response:
    return _json({"error": error, "error_description": description}, status=status)


class LtiServicesPlatform:
    """`async with LtiServicesPlatform(tool_key) as lms:` serves the LMS on a free loopback port."""

    def __init__(
        self,
        tool_key: ToolKey,
        *,
        client_id: str = "userland-tool",
        deployment_id: str = "dep-1",
        page_size: int = 0,
    ) -> None:
        self.tool_key = tool_key
        self.client_id = client_id
        self.deployment_id = deployment_id
        self.page_size = page_size  # 0: one page unless the tool sends limit
        self.faults = Faults()
        self.platform_key = RSAKey.generate_key(2048)
        self.rosters: dict[str, list[dict[str, t.Any]]] = {}
        self.line_items: dict[str, dict[str, LineItem]] = {}
        self.created_line_items: list[dict[str, t.Any]] = []
        self.token_requests: list[dict[str, str]] = []  # every form the token endpoint got
        self.tokens_issued: list[str] = []
        self.service_requests: list[tuple[str, str, str]] = []  # method, path with query, scope used
        self.score_posts: list[dict[str, t.Any]] = []  # every Score body, accepted or not
        self.deep_links: list[list[dict[str, t.Any]]] = []  # content items of each accepted response
        self.jtis: set[str] = set()
        self.platform = Platform()
        self._server: TestServer | None = None

    # -- addresses -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        return str(self._server.make_url("")).rstrip("/")

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def memberships_url(self, context_id: str) -> str:
        return f"{self.url}/nrps/{context_id}/memberships"

    def lineitems_url(self, context_id: str) -> str:
        return f"{self.url}/ags/{context_id}/lineitems"

    @property
    def deep_link_return_url(self) -> str:
        return f"{self.url}/deep_link_return"

    # -- life ------------------------------------------------------------------------------
    async def __aenter__(self) -> LtiServicesPlatform:
        app = web.Application()
        app.router.add_get("/tool/jwks", self._tool_jwks)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_post("/token", self._token)
        app.router.add_post("/moved/token", self._moved)
        app.router.add_get("/nrps/{context}/memberships", self._members)
        app.router.add_route("*", "/ags/{context}/lineitems", self._lineitems)
        app.router.add_route("*", "/ags/{context}/lineitems/{item}", self._lineitem)
        app.router.add_post("/ags/{context}/lineitems/{item}/scores", self._scores)
        app.router.add_get("/ags/{context}/lineitems/{item}/results", self._results)
        app.router.add_post("/deep_link_return", self._deep_link_return)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()
        registration = (
            Registration()
            .set_iss(self.issuer)
            .set_client_id(self.client_id)
            .set_deployment_id(self.deployment_id)
            .set_tool_key_set_url(f"{self.url}/tool/jwks")
            .set_platform_public_key(self.platform_key.as_pem(private=False).decode())
            .set_platform_private_key(self.platform_key.as_pem(private=True).decode())
        )
        self.platform._registration = registration
        return self

    def rotate_platform_key(self) -> None:
        """A new platform key: every access token issued so far stops working (as a revocation)."""
        self.platform_key = RSAKey.generate_key(2048)
        registration = self.platform._registration
        assert registration is not None
        registration.set_platform_public_key(self.platform_key.as_pem(private=False).decode())
        registration.set_platform_private_key(self.platform_key.as_pem(private=True).decode())

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            await self._server.close()

    # -- the tool's JWKS (stands in for the tool's /lti/jwks) and the platform's -------------
    async def _tool_jwks(self, request: web.Request) -> web.Response:
        return _json({"keys": [self.tool_key.public_jwk()]})

    async def _jwks(self, request: web.Request) -> web.Response:
        return _json(self.platform.get_jwks())

    # -- token endpoint ----------------------------------------------------------------------
    async def _token(self, request: web.Request) -> web.StreamResponse:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        if self.faults.token_delay:
            await asyncio.sleep(self.faults.token_delay)
        if self.faults.token_garbage is not None:
            return web.Response(body=self.faults.token_garbage, content_type="text/html")
        try:
            answer = await asyncio.to_thread(self.platform.get_access_token, form)
        except (LtiException, pyjwt.PyJWTError) as err:
            return _oauth_error("invalid_client", f"client assertion refused: {type(err).__name__}", 401)
        except Exception as err:  # the library's MissingRequiredClaim, UnsupportedGrantType
            return _oauth_error("invalid_request", type(err).__name__)
        claims = pyjwt.decode(form["client_assertion"], options={"verify_signature": False})
        if claims.get("iss") != self.client_id or claims.get("sub") != self.client_id:
            return _oauth_error("invalid_client", "iss and sub must be the client id", 401)
        audience = claims.get("aud")
        if self.token_url not in (audience if isinstance(audience, list) else [audience]):
            return _oauth_error("invalid_client", "aud must be the token endpoint", 401)
        if not claims.get("jti") or claims["jti"] in self.jtis:
            return _oauth_error("invalid_grant", "jti missing or already used")
        if not isinstance(claims.get("exp"), int) or claims["exp"] > time.time() + 3600:
            return _oauth_error("invalid_grant", "exp missing or too far ahead")
        self.jtis.add(claims["jti"])
        if not answer["scope"]:
            return _oauth_error("invalid_scope", "no known scope asked")
        self.tokens_issued.append(answer["access_token"])
        return _json(dict(answer))

    async def _moved(self, request: web.Request) -> web.Response:
        """A token URL that moved: a 307 keeps the method and body, so a client that followed it
        would hand its assertion on."""
        self.service_requests.append(("POST", request.path_qs, ""))
        raise web.HTTPTemporaryRedirect(f"{self.url}/token")

    def _scope_of(self, request: web.Request) -> set[str]:
        auth = request.headers.get("Authorization", "").split()
        if len(auth) != 2:
            return set()
        try:
            claims = Registration.decode_and_verify(auth[1], self.platform_key.as_pem(private=False).decode())
        except pyjwt.PyJWTError:
            return set()
        return set(str(claims.get("scopes", "")).split())

    @staticmethod
    def _answer(result: t.Any, link_base: str = "") -> tuple[t.Any, str]:
        """A library page dict as the spec's body, and its next page as a Link header."""
        if isinstance(result, dict) and "content" in result:
            nxt = result.get("next")
            return result["content"], (f'<{nxt}>; rel="next"' if nxt else "")
        if isinstance(result, dict) and "next" in result:
            nxt = result.pop("next")
            return result, f'<{nxt}>; rel="next"'
        return result, ""

    # -- Names and Role Provisioning ---------------------------------------------------------
    async def _members(self, request: web.Request) -> web.Response:
        context = request.match_info["context"]
        self.service_requests.append(("GET", request.path_qs, " ".join(sorted(self._scope_of(request)))))
        if context not in self.rosters and self._scope_of(request):
            return _json({"error": "no such context"}, status=404)
        query = dict(request.query)
        if self.page_size and "limit" not in query:
            query["limit"] = str(self.page_size)
        service = _Nrps(_tread("GET", query, request.headers, None), self, context)
        response = _run(service, service.handle_get_members)
        if response.code != 200:
            return _json({"error": response.message}, status=response.code)
        body, link = self._answer(response.result)
        page = int(query.get("page", 1))
        if self.faults.next_elsewhere and page == 1:
            link = f'<{self.faults.next_elsewhere}>; rel="next"'
        elif self.faults.page_loop and not link:
            link = f'<{self.memberships_url(context)}>; rel="next"'  # the address the first page had
        return _json(body, content_type=response.media_type, link=link)

    # -- Assignment and Grade ----------------------------------------------------------------
    def _ags_gate(self, request: web.Request, needs: set[str]) -> web.Response | None:
        self.service_requests.append(
            (request.method, request.path_qs, " ".join(sorted(self._scope_of(request))))
        )
        if self.faults.ags_down > 0:
            self.faults.ags_down -= 1
            return web.Response(status=503, text="maintenance")
        granted = self._scope_of(request)
        if granted and not granted & needs:
            return _json({"error": "insufficient_scope"}, status=403)
        return None

    async def _lineitems(self, request: web.Request) -> web.Response:
        context = request.match_info["context"]
        if request.method == "GET":
            refused = self._ags_gate(request, {SCOPE_LINEITEM, SCOPE_LINEITEM_RO})
            if refused:
                return refused
            service = _Ags(_tread("GET", request.query, request.headers, None), self, context)
            response = _run(service, service.handle_get_lineitems)
        elif request.method == "POST":
            refused = self._ags_gate(request, {SCOPE_LINEITEM})
            if refused:
                return refused
            if request.content_type != LINEITEM_TYPE:
                return _json({"error": f"Content-Type must be {LINEITEM_TYPE}"}, status=415)
            body = await request.json()
            problem = _line_item_problem(body)
            if problem:
                return _json({"error": problem}, status=400)
            service = _Ags(_tread("POST", {}, request.headers, body), self, context)
            response = _run(service, service.handle_create_lineitem)
        else:
            return web.Response(status=405)
        if response.code >= 400:
            return _json({"error": response.message}, status=response.code)
        body, link = self._answer(response.result)
        return _json(body, status=response.code, content_type=response.media_type, link=link)

    async def _lineitem(self, request: web.Request) -> web.Response:
        refused = self._ags_gate(request, {SCOPE_LINEITEM, SCOPE_LINEITEM_RO})
        if refused:
            return refused
        context, item = request.match_info["context"], request.match_info["item"]
        service = _Ags(_tread(request.method, {}, request.headers, None), self, context)
        response = _run(service, service.handle_get_lineitem, line_item_id=item)
        return _json(
            response.result if response.code == 200 else {"error": response.message},
            status=response.code,
            content_type=response.media_type,
        )

    async def _scores(self, request: web.Request) -> web.Response:
        refused = self._ags_gate(request, {SCOPE_SCORE})
        if refused:
            return refused
        if request.content_type != SCORE_TYPE:
            return _json({"error": f"Content-Type must be {SCORE_TYPE}"}, status=415)
        score = await request.json()
        self.score_posts.append(score)
        problem = _score_problem(score)
        if problem:
            return _json({"error": problem}, status=400)
        context, item = request.match_info["context"], request.match_info["item"]
        service = _Ags(_tread("POST", {}, request.headers, score), self, context)
        response = _run(service, service.handle_update_score, line_item_id=item)
        return _json({"status": response.message}, status=response.code)

    async def _results(self, request: web.Request) -> web.Response:
        refused = self._ags_gate(request, {SCOPE_RESULT})
        if refused:
            return refused
        context, item = request.match_info["context"], request.match_info["item"]
        service = _Ags(_tread("GET", request.query, request.headers, None), self, context)
        service.ags.lineitem_url = f"{self.lineitems_url(context)}/{item}"
        response = _run(service, service.handle_get_results, line_item_id=item)
        body, link = self._answer(response.result)
        return _json(body, status=response.code, content_type=response.media_type, link=link)

    def scores_of(self, context_id: str, resource_id: str) -> dict[str, dict[str, t.Any]]:
        """userId -> the Score the gradebook holds, for the line item with that resourceId."""
        for item in self.line_items.get(context_id, {}).values():
            if item.body.get("resourceId") == resource_id:
                return item.scores
        return {}

    # -- Deep Linking --------------------------------------------------------------------------
    async def _deep_link_return(self, request: web.Request) -> web.Response:
        token = str((await request.post()).get("JWT", ""))
        try:
            items = await asyncio.to_thread(self.platform.validate_deeplinking_resp, {"JWT": token})
        except Exception as err:  # the library raises several kinds
            return web.Response(
                status=400, text=f"deep linking response refused: {type(err).__name__}: {err}"
            )
        claims = pyjwt.decode(token, options={"verify_signature": False})
        if claims.get("aud") not in (self.issuer, [self.issuer]):
            return web.Response(status=400, text="aud must be the platform's issuer")
        if claims.get("iss") != self.client_id:
            return web.Response(status=400, text="iss must be the client id")
        if claims.get("https://purl.imsglobal.org/spec/lti/claim/deployment_id") != self.deployment_id:
            return web.Response(status=400, text="unknown deployment id")
        if claims.get("https://purl.imsglobal.org/spec/lti-dl/claim/data") != "platform-opaque-data":
            return web.Response(status=400, text="data not echoed")
        self.deep_links.append(items)
        return web.Response(text="linked")


def _line_item_problem(body: t.Any) -> str:
    if not isinstance(body, dict):
        return "a line item is a JSON object"
    maximum = body.get("scoreMaximum")
    if isinstance(maximum, bool) or not isinstance(maximum, (int, float)) or maximum <= 0:
        return "scoreMaximum must be a number above 0"
    if not isinstance(body.get("label"), str) or not body["label"].strip():
        return "label is required"
    return ""


def _score_problem(score: t.Any) -> str:
    if not isinstance(score, dict):
        return "a score is a JSON object"
    for name in ("userId", "timestamp", "activityProgress", "gradingProgress"):
        if not isinstance(score.get(name), str) or not score[name]:
            return f"{name} is required"
    try:
        stamp = _when(score["timestamp"])
    except ValueError:
        return "timestamp must be ISO 8601"
    if stamp.tzinfo is None:
        return "timestamp needs a time zone"
    if score["activityProgress"] not in ACTIVITY or score["gradingProgress"] not in GRADING:
        return "unknown activityProgress or gradingProgress"
    if "scoreGiven" in score:
        given, maximum = score.get("scoreGiven"), score.get("scoreMaximum")
        if not isinstance(given, (int, float)) or given < 0:
            return "scoreGiven must be a number, at least 0"
        if not isinstance(maximum, (int, float)) or maximum <= 0:
            return "scoreGiven needs scoreMaximum above 0"
    return ""
