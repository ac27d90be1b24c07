"""Login-to-GitHub-id bindings: a login belongs to the account that first used it.

GitHub lets a user rename their account, after which someone else may register the old
name. The first login binds the (lowercased) name to GitHub's immutable numeric id in a
Redis hash (platform/model/keyspace.py `login_binding_key`); a later login with that name but another
id is refused, so the newcomer cannot inherit the old owner's environment. Admins can read and
clear a binding (after checking who is who). A name an LMS user holds (an LTI launch,
auth/lti_store.py) is bound the same way, to the LMS identity, and is never a GitHub account's,
unless that LMS user linked their GitHub account to it (auth/account_link.py: `link_github`, and
`linked_login`, which a GitHub sign-in asks first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions

from userland.platform.clients.sessions import store_error
from userland.platform.model.keyspace import GITHUB_LINK_PREFIX, github_link_key, login_binding_key


@dataclass(frozen=True)
class Binding:
    login: str
    github_id: int  # 0 when an LMS user holds the name
    bound_at: float
    lti_subject: str = ""  # the digest of (issuer, sub) of the LMS user holding it (auth/lti_store.py)


# One script, so that a GitHub sign-in and an LMS launch racing for one free name cannot both
# take it: the name is GitHub's only when no LMS user holds it (and the reverse, lti_store.py),
# unless that LMS user linked this GitHub account to it (auth/account_link.py: the login then has
# both). A GitHub account linked to a login signs in there only, never under a name of its own.
_BIND_GITHUB = """
local linked = redis.call('GET', KEYS[2])
if linked and linked ~= ARGV[3] then return false end
local held = redis.call('HGET', KEYS[1], 'github_id')
if not held and redis.call('HEXISTS', KEYS[1], 'lti') == 1 then return false end
redis.call('HSETNX', KEYS[1], 'github_id', ARGV[1])
redis.call('HSETNX', KEYS[1], 'bound_at', ARGV[2])
return redis.call('HGET', KEYS[1], 'github_id')
"""

# "Link your GitHub account" (auth/account_link.py): the LMS user's login gets this GitHub id, when
# the id is linked nowhere and holds no name of its own, and the login is still an LMS user's
# with no GitHub id. 'ok', or why not.
_LINK_GITHUB = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 'github_taken' end
if redis.call('HGET', KEYS[3], 'github_id') == ARGV[1] then return 'github_taken' end
if redis.call('HEXISTS', KEYS[2], 'github_id') == 1 then return 'has_github' end
if redis.call('HEXISTS', KEYS[2], 'lti') == 0 then return 'no_door' end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 'github_id', ARGV[1], 'linked_at', ARGV[3])
return 'ok'
"""

# Releasing a name releases the GitHub account linked to it too (and only a link to this name).
_CLEAR = """
local gid = redis.call('HGET', KEYS[1], 'github_id')
if gid and redis.call('GET', ARGV[1] .. gid) == ARGV[2] then redis.call('DEL', ARGV[1] .. gid) end
return redis.call('DEL', KEYS[1])
"""


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class LoginBindings:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._redis = client

    async def bind(self, login: str, github_id: int) -> bool:
        """Bind `login` to `github_id` if unbound; True when it is (now) bound to that id."""
        key = login_binding_key(login)
        try:
            # HSETNX makes the first writer win when two logins race; a name an LMS user holds
            # is never a GitHub account's.
            bound = await self._redis.eval(_BIND_GITHUB, 2, key, github_link_key(github_id),  # type: ignore[misc]
                                           str(github_id), f"{time.time():.3f}", login.lower())
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return _text(bound) == str(github_id)

    async def linked_login(self, github_id: int) -> str | None:
        """The login an LMS user linked this GitHub account to, if any."""
        try:
            value = await self._redis.get(github_link_key(github_id))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return None if value is None else _text(value)

    async def link_github(self, login: str, github_id: int, github_name: str) -> str:
        """Give the LMS user's `login` the GitHub door `github_id` (whose own name is
        `github_name`): 'ok', or the reason nothing changed (auth/rules/account_link.py)."""
        try:
            result = await self._redis.eval(  # type: ignore[misc]
                _LINK_GITHUB, 3, github_link_key(github_id), login_binding_key(login),
                login_binding_key(github_name), str(github_id), login.lower(), f"{time.time():.3f}")
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return _text(result)

    async def get(self, login: str) -> Binding | None:
        try:
            fields = await self._redis.hgetall(login_binding_key(login))  # type: ignore[misc]
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        values = {_text(k): _text(v) for k, v in fields.items()}
        if not values.get("github_id") and not values.get("lti"):
            return None
        try:
            return Binding(login=login.lower(), github_id=int(values.get("github_id") or 0),
                           bound_at=float(values.get("bound_at") or 0), lti_subject=values.get("lti", ""))
        except ValueError:
            return None

    async def clear(self, login: str) -> bool:
        """Remove the binding; True when there was one."""
        try:
            removed = await self._redis.eval(_CLEAR, 1, login_binding_key(login),  # type: ignore[misc]
                                             GITHUB_LINK_PREFIX, login.lower())
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return bool(removed)
