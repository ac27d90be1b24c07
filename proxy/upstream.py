"""HTTP forwarding: one upstream connection pool, bodies streamed both ways.

HTTP requests go through `UpstreamPool` (upstream_client.py): keep-alive per upstream, no
decompression, no redirects followed, no cookie jar (one pool serves every student: a jar
would hand one student's cookies to another). WebSockets still use the aiohttp client
session of `make_client_session` (same rules). Request bodies are passed on as they arrive and
response bodies are written as they come, so memory stays flat for any size; only a small
response with a Content-Length (<= 64 KiB) is read whole first, so that its headers and body
leave in one write instead of three. A response whose headers hold bytes that are not valid
header text (control characters, undecodable bytes) is refused with the 502 page.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from yarl import URL

from userland.proxy.rules.headers import CookieNames, client_response_headers, invalid_header
from userland.proxy.upstream_client import UpstreamError, UpstreamPool

__all__ = ["UpstreamError", "UpstreamPool", "forward_http", "make_client_session", "target_url"]

CHUNK = 256 * 1024
# Responses up to this size with a Content-Length are read whole, then sent in one write.
SMALL_BODY = 64 * 1024


def make_client_session(*, limit: int = 0, limit_per_host: int = 0,
                        connect_timeout: float = 10.0) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit_per_host,
                                     ttl_dns_cache=30, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
        read_bufsize=2**18,
    )


def target_url(base: str, raw_path: str) -> URL:
    """The upstream URL: its base plus the client's path and query, byte for byte."""
    if not raw_path.startswith("/"):
        raw_path = "/" + raw_path
    return URL(base + raw_path, encoded=True)


async def _body(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(CHUNK):
        yield chunk


async def forward_http(request: web.Request, pool: UpstreamPool, base: str,
                       headers: list[tuple[str, str]], *, session_cookie: CookieNames) -> web.StreamResponse:
    """Send `request` to `base` + its raw path and stream the answer back. Raises UpstreamError
    before any byte of a response has been sent; after that, a broken upstream ends the
    response early."""
    data = _body(request) if request.body_exists else None
    upstream = await pool.request(request.method, base, request.raw_path, headers, data)
    if invalid_header(upstream.message.raw_headers) is not None:
        # Bytes aiohttp would not write back as received (a Set-Cookie name could turn into a
        # platform cookie's): refuse the response, the client gets the 502 page.
        upstream.release()
        raise UpstreamError("invalid", "a response header holds bytes that are not valid in a header")
    response_headers = client_response_headers(upstream.headers, session_cookie=session_cookie)
    length = upstream.content_length
    if length is not None and length <= SMALL_BODY and request.method != "HEAD" \
            and upstream.status not in (204, 304):
        # A small body of known length: read it, then headers and body leave in one write
        # (a streamed response costs a send per part). Bounded, so memory stays flat.
        try:
            body = await upstream.content.readexactly(length) if length else b""
        except (TimeoutError, aiohttp.ClientError, asyncio.IncompleteReadError, OSError) as err:
            raise UpstreamError("broken", repr(err)) from None
        finally:
            upstream.release()
        return web.Response(status=upstream.status, reason=upstream.reason, headers=response_headers,
                            body=body)
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                  headers=response_headers)
    try:
        # Content-Length (when the upstream sent one) was copied, so the body goes out
        # unchanged; otherwise aiohttp chunks it.
        await response.prepare(request)
        if request.method != "HEAD" and upstream.status not in (204, 304):
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        await response.write_eof()
        return response
    except (TimeoutError, aiohttp.ClientError, ConnectionResetError) as err:
        # Either side broke mid-body: the status line is out already, so cut the connection
        # and let the client see a truncated response rather than a wrong complete one.
        if request.transport is not None:
            request.transport.close()
        raise UpstreamError("interrupted", repr(err), response) from None
    finally:
        upstream.release()
