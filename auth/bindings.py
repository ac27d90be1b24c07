"""Login-to-GitHub-id bindings: a login belongs to the account that first used it.

GitHub lets a user rename their account, after which someone else may register the old
name. The first login binds the (lowercased) name to GitHub's immutable numeric id in the
Redis hash `userland:login-id:<login>`; a later login with that name but another id is
refused, so the newcomer cannot inherit the old owner's environment. Admins can read and
clear a binding (after checking who is who).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions

from userland.platform.sessions import store_error

BINDING_KEY_PREFIX = "userland:login-id:"


@dataclass(frozen=True)
class Binding:
    login: str
    github_id: int
    bound_at: float


def _key(login: str) -> str:
    return BINDING_KEY_PREFIX + login.lower()


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class LoginBindings:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._redis = client

    async def bind(self, login: str, github_id: int) -> bool:
        """Bind `login` to `github_id` if unbound; True when it is (now) bound to that id."""
        key = _key(login)
        try:
            # HSETNX makes the first writer win when two logins race.
            await self._redis.hsetnx(key, "github_id", str(github_id))  # type: ignore[misc]
            await self._redis.hsetnx(key, "bound_at", f"{time.time():.3f}")  # type: ignore[misc]
            bound = await self._redis.hget(key, "github_id")  # type: ignore[misc]
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return _text(bound) == str(github_id)

    async def get(self, login: str) -> Binding | None:
        try:
            fields = await self._redis.hgetall(_key(login))  # type: ignore[misc]
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        values = {_text(k): _text(v) for k, v in fields.items()}
        try:
            return Binding(login=login.lower(), github_id=int(values["github_id"]),
                           bound_at=float(values.get("bound_at") or 0))
        except (KeyError, ValueError):
            return None

    async def clear(self, login: str) -> bool:
        """Remove the binding; True when there was one."""
        try:
            removed = await self._redis.delete(_key(login))
        except redis.exceptions.RedisError as exc:
            raise store_error(exc) from exc
        return bool(removed)
