"""Login-to-GitHub-id bindings: a login belongs to the account that first used it.

GitHub lets a user rename their account, after which someone else may register the old
name. The first login binds the (lowercased) name to GitHub's immutable numeric id in a
Redis hash (platform/model/keyspace.py `login_binding_key`); a later login with that name but another
id is refused, so the newcomer cannot inherit the old owner's environment. Admins can read and
clear a binding (after checking who is who). A name an LMS user holds (an LTI launch,
auth/lti_store.py) is bound the same way, to the LMS identity, and is never a GitHub account's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions

from userland.platform.clients.sessions import store_error
from userland.platform.model.keyspace import login_binding_key


@dataclass(frozen=True)
class Binding:
    login: str
    github_id: int  # 0 when an LMS user holds the name
    bound_at: float
    lti_subject: str = ""  # the digest of (issuer, sub) of the LMS user holding it (auth/lti_store.py)


# One script, so that a GitHub sign-in and an LMS launch racing for one free name cannot both
# take it: the name is GitHub's only when no LMS user holds it (and the reverse, lti_store.py).
_BIND_GITHUB = """
if redis.call('HEXISTS', KEYS[1], 'lti') == 1 then return false end
redis.call('HSETNX', KEYS[1], 'github_id', ARGV[1])
redis.call('HSETNX', KEYS[1], 'bound_at', ARGV[2])
return redis.call('HGET', KEYS[1], 'github_id')
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
            bound = await self._redis.eval(_BIND_GITHUB, 1, key, str(github_id),  # type: ignore[misc]
                                           f"{time.time():.3f}")
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return _text(bound) == str(github_id)

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
            removed = await self._redis.delete(login_binding_key(login))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return bool(removed)
