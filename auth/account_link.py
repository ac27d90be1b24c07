"""Linking a student's GitHub and LMS sign-ins to one login (the decisions: auth/rules/account_link.py;
the account page that starts a link: auth/account_page.py).

- "Link your GitHub account" ends in the GitHub callback (auth/login.py): `finish_github_link`
  checks that the browser is still in the session that started it, then that the GitHub account
  has no login of its own, and links it in one Redis script (auth/bindings.py `link_github`).
- "Link your LMS account" is armed in Redis (`LmsLinks.arm`: single use, 10 minutes, for the
  session cookie that armed it) and ends in `/lti/continue` (auth/lti_continue.py): when the
  browser's session is the one that armed it, and the launch's LMS user was bound a moment ago
  at this very launch (seen for the first time), the LMS user is moved to the armed login in
  one Redis script (`LmsLinks.move`) before anything was made for the new name.

Every link, made or refused, is a log line and an entry of the audit stream across courses (the
admin's audit page); neither holds a secret (logins, reasons and GitHub ids only).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis.asyncio
import redis.exceptions
from aiohttp import web

from userland.auth import pages
from userland.auth.context import AuthContext, current_session, session_cookie_id
from userland.auth.oauth_state import PendingLogin
from userland.auth.rules import account_link as rules
from userland.platform.clients.sessions import Session, store_error
from userland.platform.model.identity import Role
from userland.platform.model.keyspace import (
    audit_stream_key,
    digest,
    lms_link_key,
    login_binding_key,
    lti_subject_key,
)

log = logging.getLogger(__name__)

LMS_LINK_TTL_SECONDS = 600
# A launch's LMS user counts as seen for the first time while its binding is this young (the
# launch's ticket lives 2 minutes): an older one may have an environment of its own.
FRESH_SECONDS = 300
ACCOUNT_PATH = "/auth/account"
_AUDIT_MAXLEN = 5_000
_BY_REASON = {r.reason: r for r in (rules.GITHUB_TAKEN, rules.HAS_GITHUB, rules.HAS_LMS, rules.NO_DOOR,
                                    rules.LMS_TAKEN)}

# The armed link of a login, taken only by the session (cookie digest) that armed it.
_TAKE_ARMED = """
if redis.call('HGET', KEYS[1], 'session') ~= ARGV[1] then return false end
local github_id = redis.call('HGET', KEYS[1], 'github_id')
redis.call('DEL', KEYS[1])
return github_id
"""

# Move the LMS user (KEYS[1]) from the name bound to it a moment ago (KEYS[2], ARGV[2]) to the
# armed login (KEYS[3]), which must still be this GitHub account's (ARGV[4]) with no LMS user.
_MOVE_SUBJECT = """
if redis.call('HGET', KEYS[1], 'login') ~= ARGV[2] then return 'lms_taken' end
if tonumber(redis.call('HGET', KEYS[1], 'bound_at') or '0') < tonumber(ARGV[6]) then return 'lms_taken' end
if redis.call('HGET', KEYS[2], 'lti') ~= ARGV[1] or redis.call('HEXISTS', KEYS[2], 'github_id') == 1 then
  return 'lms_taken'
end
if redis.call('HGET', KEYS[3], 'github_id') ~= ARGV[4] then return 'no_door' end
if redis.call('HEXISTS', KEYS[3], 'lti') == 1 then return 'has_lms' end
redis.call('HSET', KEYS[3], 'lti', ARGV[1], 'linked_at', ARGV[5])
redis.call('HSET', KEYS[1], 'login', ARGV[3], 'bound_at', ARGV[5])
redis.call('DEL', KEYS[2])
return 'ok'
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LmsLinks:
    """The armed "Link your LMS account" of each login, and the move that completes it."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._redis = client

    async def arm(self, login: str, github_id: int, session_digest: str) -> None:
        key = lms_link_key(login)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.hset(key, mapping={"session": session_digest, "github_id": str(github_id)})
                pipe.expire(key, LMS_LINK_TTL_SECONDS)
                await pipe.execute()
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc

    async def armed(self, login: str) -> bool:
        try:
            return bool(await self._redis.exists(lms_link_key(login)))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc

    async def take(self, login: str, session_digest: str) -> int | None:
        """The GitHub id of `login`'s armed link, removed, when `session_digest` armed it."""
        try:
            value = await self._redis.eval(_TAKE_ARMED, 1, lms_link_key(login), session_digest)  # type: ignore[misc]
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return None if value is None else int(_text(value))

    async def move(self, subject: str, fresh_login: str, login: str, github_id: int) -> str:
        now = time.time()
        try:
            result = await self._redis.eval(  # type: ignore[misc]
                _MOVE_SUBJECT, 3, lti_subject_key(subject), login_binding_key(fresh_login),
                login_binding_key(login), subject, fresh_login.lower(), login.lower(), str(github_id),
                f"{now:.3f}", f"{now - FRESH_SECONDS:.3f}")
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return _text(result)

    async def audit(self, login: str, action: str, result: str) -> None:
        """An entry in the audit stream across courses (web/audit.py's fields), and a log line."""
        log.info("account link", extra={"event": action, "login": login, "result": result})
        fields = {"time": repr(time.time()), "actor": login, "role": "student", "action": action,
                  "course": "", "targets": json.dumps([login]), "result": result, "filter": ""}
        try:
            await self._redis.xadd(audit_stream_key(""), fields,  # type: ignore[arg-type]
                                   maxlen=_AUDIT_MAXLEN, approximate=True)
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc


LMS_LINKS = web.AppKey("userland_lms_links", LmsLinks)


def lms_links(request: web.Request) -> LmsLinks:
    return request.config_dict[LMS_LINKS]


def reserved(auth: AuthContext) -> frozenset[str]:
    return rules.reserved_names(auth.settings.admins, auth.settings.instructors)


def _refused(refusal: rules.Refusal) -> web.Response:
    return pages.render("message.html", status=403, title=refusal.title, message=refusal.message,
                        link_url=ACCOUNT_PATH, link_text="Back to your account")


async def finish_github_link(request: web.Request, auth: AuthContext, links: LmsLinks,
                             pending: PendingLogin, *, github_name: str, github_id: int, role: Role,
                             allowed: bool) -> web.StreamResponse:
    """The GitHub callback of "Link your GitHub account" (the state was this browser's, once)."""
    cookie = session_cookie_id(request)
    session = await current_session(request)
    target = await auth.bindings.get(pending.link)
    own = await auth.bindings.get(github_name)
    facts = rules.GitHubLinkFacts(
        link_login=pending.link, link_session=pending.link_session,
        session_login=session.login if session is not None else "",
        session_digest=digest(cookie) if cookie and session is not None else "",
        github_name=github_name, github_role=role, github_allowed=allowed,
        linked_login=await auth.bindings.linked_login(github_id) or "",
        name_bound_to_it=own is not None and own.github_id == github_id,
        target_door=rules.doors(target.github_id, target.lti_subject) if target else rules.doors(0, ""))
    refusal = rules.github_link(facts, reserved(auth))
    if refusal is None:
        result = await auth.bindings.link_github(pending.link, github_id, github_name)
        refusal = None if result == "ok" else _BY_REASON.get(result, rules.GITHUB_TAKEN)
    if refusal is not None:
        auth.refusals[f"link_{refusal.reason}"] += 1
        log.warning("GitHub link refused", extra={"event": "account.github_link_refused",
                                                  "login": pending.link, "github_id": github_id,
                                                  "reason": refusal.reason})
        await links.audit(pending.link, "account.link-github", f"refused: {refusal.reason}")
        return _refused(refusal)
    await links.audit(pending.link, "account.link-github", f"linked GitHub account {github_name}")
    return pages.render("message.html", title="GitHub account linked",
                        message=f"You can now sign in as {pending.link} with the GitHub account "
                                f"{github_name} too: both land in the same environments.",
                        link_url=ACCOUNT_PATH, link_text="Back to your account")


async def apply_lms_link(request: web.Request, links: LmsLinks,
                         payload: dict[str, Any]) -> dict[str, Any] | web.Response:
    """`/lti/continue`: the launch's ticket, with its login replaced when this browser's session
    armed "Link your LMS account" and the launch's LMS user is new; a refusal page when it armed
    one and the LMS user is not new (nothing changed); the ticket unchanged otherwise."""
    cookie = session_cookie_id(request)
    session: Session | None = await current_session(request) if cookie else None
    if cookie is None or session is None or session.github_id <= 0:
        return payload
    github_id = await links.take(session.login, digest(cookie))
    if github_id is None or github_id != session.github_id:
        return payload
    refusal = rules.lms_link(armed=True, fresh=bool(payload.get("fresh")) and bool(payload.get("subject")))
    if refusal is None:
        result = await links.move(str(payload["subject"]), str(payload["login"]), session.login, github_id)
        refusal = None if result == "ok" else _BY_REASON.get(result, rules.LMS_TAKEN)
    if refusal is not None:
        log.warning("LMS link refused", extra={"event": "account.lms_link_refused", "login": session.login,
                                               "reason": refusal.reason})
        await links.audit(session.login, "account.link-lms", f"refused: {refusal.reason}")
        return _refused(refusal)
    await links.audit(session.login, "account.link-lms", "linked LMS account")
    return {**payload, "login": session.login}
