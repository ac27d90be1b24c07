"""Fixtures for the auth tests. What is real: Redis (the session-wide `redis_url` server, on
a database of its own that each test flushes), the aiohttp application with the auth routes
served on a loopback port, and HTTP between it and GitHub. What is faked: GitHub itself, as
a real local aiohttp server (tests/fakes/github.py) with GitHub Enterprise style URLs.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

# tests/ holds the shared fakes (tests/fakes); make it importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from authflow import AUTH_TEST_DB, AppFactory
from fakes.github import FakeGitHub


@pytest.fixture
async def auth_redis(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url.rsplit("/", 1)[0] + f"/{AUTH_TEST_DB}")
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def fake_github() -> AsyncIterator[FakeGitHub]:
    fake = FakeGitHub()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


@pytest.fixture
def make_app(aiohttp_client: object, fake_github: FakeGitHub,
             auth_redis: redis.asyncio.Redis) -> AppFactory:
    return AppFactory(aiohttp_client, fake_github, auth_redis)
