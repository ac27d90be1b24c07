"""Anonymous login starts cannot evict sessions (issue 7 part 4).

Real: redis-server started with the arguments of deploy/redis.yaml (only the memory limit made
small, so the attack is quick), the platform's session store and OAuth state store on it; and
the auth routes on a loopback port with the shared test Redis for the rate limit.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio
import yaml
from authflow import AppFactory

from userland.auth.oauth_state import MAX_NEXT_URL, OAuthStateStore
from userland.local.redisserver import redis_server
from userland.platform.clients.sessions import RedisSessionStore, Session, SessionStoreUnavailable
from userland.platform.model.keyspace import OAUTH_STATE_PREFIX, pattern

# A Redis configured as deploy/ configures it (deployed_client), or the session's (make_app).
pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
SMALL_MEMORY = "3mb"


def deployed_redis_args() -> list[str]:
    """redis-server's options from deploy/redis.yaml, the memory limit replaced by SMALL_MEMORY."""
    for doc in yaml.safe_load_all((REPO / "deploy" / "redis.yaml").read_text()):
        if doc and doc.get("kind") == "Deployment":
            args = [str(a) for a in doc["spec"]["template"]["spec"]["containers"][0]["args"]]
            break
    else:
        raise AssertionError("no Deployment in deploy/redis.yaml")
    assert args[0] == "redis-server"
    options = args[1:]
    kept: list[str] = []
    i = 0
    while i < len(options):
        name, value = options[i], options[i + 1]
        i += 2
        if name in ("--save", "--appendonly", "--protected-mode"):
            continue  # the throwaway server sets these itself
        kept += [name, SMALL_MEMORY if name == "--maxmemory" else value]
    assert "--maxmemory-policy" in kept
    return kept


@pytest.fixture
def deployed_redis() -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="userland-redis-deployed-"))
    with redis_server(state, deployed_redis_args()) as url:
        yield url


@pytest.fixture
async def deployed_client(deployed_redis: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(deployed_redis)
    for _ in range(100):
        try:
            await client.ping()
            break
        except redis.exceptions.ConnectionError:
            await asyncio.sleep(0.05)
    yield client
    await client.aclose()


async def test_twenty_thousand_pending_logins_never_evict_a_session(
        deployed_client: redis.asyncio.Redis) -> None:
    sessions = RedisSessionStore(deployed_client, 8 * 3600)
    cookies = [await sessions.save(Session(login=f"student{i}", github_id=i, role="student", csrf="c",
                                           created=time.time())) for i in range(50)]
    states = OAuthStateStore(deployed_client)
    refused = 0
    for _ in range(20_000):  # what anonymous /auth/login calls store, from as many addresses as needed
        try:
            await states.begin("/" + "x" * 1500)
        except SessionStoreUnavailable:
            refused += 1  # Redis is full: new records are refused, nothing is evicted
    for i, cookie in enumerate(cookies):
        session = await sessions.load(cookie)
        assert session is not None and session.login == f"student{i}", f"session {i} was evicted"
    info = await deployed_client.info("stats")
    assert info["evicted_keys"] == 0
    assert refused > 0, "the memory limit was never reached: the test proves nothing"


async def test_pending_login_records_stay_small(deployed_client: redis.asyncio.Redis) -> None:
    states = OAuthStateStore(deployed_client)
    pending = await states.begin("/" + "a" * (MAX_NEXT_URL * 10))
    assert pending.next_url == "/"
    keys = await deployed_client.keys(pattern(OAUTH_STATE_PREFIX))
    assert len(keys) == 1
    assert await deployed_client.strlen(keys[0]) < 300
    assert 0 < await deployed_client.ttl(keys[0]) <= 600


async def test_login_starts_are_rate_limited_per_client(make_app: AppFactory) -> None:
    h = await make_app(login_rate_per_minute=20)
    answers = []
    for _ in range(60):
        resp = await h.client.get("/auth/login", params={"next": "/"}, allow_redirects=False)
        answers.append(resp.status)
        if resp.status == 429:
            assert resp.headers["Retry-After"] == "60"
            assert "Too many sign-in attempts" in await resp.text()
    assert answers[:20] == [302] * 20 or answers.count(302) <= 40  # a minute boundary may pass once
    assert answers.count(429) >= 20
    assert len(await h.redis.keys(pattern(OAUTH_STATE_PREFIX))) == answers.count(302)


async def test_behind_a_trusted_proxy_each_client_has_its_own_login_limit(make_app: AppFactory) -> None:
    """Behind the Ingress of deploy/README.md every request comes from the Ingress controller's
    address: one anonymous client starting 21 logins a minute locked everyone out of signing in
    (and a class signing in at once hit the limit). With USERLAND_TRUSTED_PROXIES the limit counts
    the client the proxy names in X-Forwarded-For; a client cannot pick its own bucket around it."""
    h = await make_app(login_rate_per_minute=20, trusted_proxies=("127.0.0.0/8",))

    async def start(forwarded_for: str) -> int:
        resp = await h.client.get("/auth/login", params={"next": "/"}, allow_redirects=False,
                                  headers={"X-Forwarded-For": forwarded_for})
        return resp.status

    # Hops the client wrote itself, left of what the proxy saw, do not give it fresh buckets.
    attacker = [await start(f"198.51.100.{i}, 203.0.113.9") for i in range(60)]
    assert attacker.count(429) >= 20  # 60 starts: at least 20 over, even across a minute boundary
    # Another client through the same proxy still signs in (before: 429, one shared limit).
    assert await start("198.51.100.7") == 302

    # Without trusted proxies the header is not believed: the TCP peer is the client.
    untrusting = await make_app(login_rate_per_minute=20)
    statuses = []
    for i in range(60):
        resp = await untrusting.client.get("/auth/login", params={"next": "/"}, allow_redirects=False,
                                           headers={"X-Forwarded-For": f"192.0.2.{i}"})
        statuses.append(resp.status)
    assert statuses.count(429) >= 20
