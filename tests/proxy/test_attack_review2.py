"""Second attack review of issues 6 and 7: what a signed-in student can pile up in Redis.

A signed-in student repeats the handoff of their own origin (platform `/auth/handoff`, then the
origin's `/__userland/handoff`) in a loop. Each round made a new origin session that lived as
long as the platform session (hours): nothing capped them, and Redis runs with `noeviction`, so
one student could fill it and every new sign-in on the platform would fail. A platform session
now holds at most one origin session per origin: a new handoff replaces the previous one.

The same student can ask the platform for handoff codes without ever redeeming them: each one
is a Redis record for 60 s. A platform session may ask for at most HANDOFF_CODES_PER_MINUTE of
them a minute; beyond that the handoff is a 429 page that says to wait, and stores nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import redis.asyncio

from userland.auth.origin_sessions import HANDOFF_CODES_PER_MINUTE
from userland.platform.model.keyspace import HANDOFF_PREFIX, ORIGIN_SESSION_PREFIX, session_key_of

from .conftest import IDE_HOST, EchoFactory, GatewayFactory, World
from .test_origins import ALICE, follow_handoff, host_of, location, platform


async def _records_of(client: redis.asyncio.Redis, platform_cookie: str,
                              prefix: str = ORIGIN_SESSION_PREFIX) -> int:
    """How many records under `prefix` (origin sessions, or handoff codes) the platform session
    made: other tests' records may still be live in the same Redis."""
    parent = session_key_of(hashlib.sha256(platform_cookie.encode()).hexdigest())
    count = 0
    async for key in client.scan_iter(prefix + "*"):
        raw = await client.get(key)
        if raw is not None and json.loads(raw)["parent"] == parent:
            count += 1
    return count


async def test_repeated_handoffs_keep_one_origin_session_per_origin(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        redis_url: str) -> None:
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", await echo_factory("alice-env"))
    await world.template("pma", host="pma.test")
    await world.environment("pma", "alice", await echo_factory("alice-pma"))
    gw = await gateway_factory()
    alice = await sessions("alice")
    cookies = [(await follow_handoff(gw, alice, ALICE)).cookies["userland_origin"].value for _ in range(20)]
    other = (await follow_handoff(gw, alice, "http://alice.pma.test")).cookies["userland_origin"].value
    client = redis.asyncio.from_url(redis_url)
    try:
        # Before: 21 records, each valid for the platform session's lifetime.
        assert await _records_of(client, alice) == 2
    finally:
        await client.aclose()
    # The newest cookie of each origin works; the replaced ones do not.
    latest = await gw.get("/", headers={"Host": host_of(ALICE), "Cookie": f"userland_origin={cookies[-1]}"})
    assert (await latest.json())["upstream"] == "alice-env"
    pma = await gw.get("/", headers={"Host": "alice.pma.test", "Cookie": f"userland_origin={other}"})
    assert (await pma.json())["upstream"] == "alice-pma"
    replaced = await gw.get("/", headers={"Host": host_of(ALICE), "Cookie": f"userland_origin={cookies[0]}"})
    assert replaced.status == 401


async def test_unredeemed_handoff_codes_are_capped_per_session(
        world: World, echo_factory: EchoFactory, gateway_factory: GatewayFactory, sessions: Any,
        redis_url: str) -> None:
    await world.template("vscode", host=IDE_HOST)
    await world.environment("vscode", "alice", await echo_factory("alice-env"))
    await world.environment("vscode", "bob", await echo_factory("bob-env"))
    gw = await gateway_factory()
    alice, bob = await sessions("alice"), await sessions("bob")

    async def ask(cookie: str) -> Any:
        return await gw.get("/auth/handoff", params={"origin": ALICE if cookie == alice else
                                                     f"http://bob.{IDE_HOST}", "next": "/"},
                            headers=platform(cookie), allow_redirects=False)

    codes = []
    for _ in range(HANDOFF_CODES_PER_MINUTE):
        issued = await ask(alice)
        assert issued.status == 302, await issued.text()
        codes.append(location(issued)[1]["code"])
    # Before: every further request stored one more code, without end.
    refused = await ask(alice)
    assert refused.status == 429 and refused.headers["Retry-After"] == "60"
    assert "wait a minute" in await refused.text()
    client = redis.asyncio.from_url(redis_url)
    try:
        assert await _records_of(client, alice, HANDOFF_PREFIX) == HANDOFF_CODES_PER_MINUTE
    finally:
        await client.aclose()
    # Another student is not affected, and alice's codes still work.
    assert (await ask(bob)).status == 302
    redeemed = await gw.get("/__userland/handoff", params={"code": codes[0], "next": "/"},
                            headers={"Host": host_of(ALICE)}, allow_redirects=False)
    assert redeemed.status == 302 and "userland_origin" in redeemed.cookies
