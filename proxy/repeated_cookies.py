"""A platform cookie sent twice: refused, with a page that says how to recover.

A page on a sibling host (a student's environment at `alice.ide.example.edu`) can set a cookie
for the parent domain from script (`document.cookie = "userland_origin=...; Domain=ide.example.edu"`;
the gateway removes Domain from environments' Set-Cookie headers, but no proxy sees script).
The browser then sends two cookies of that name to every other student's origin, and the server
keeps one of them: aiohttp keeps the last, which is the planted one whenever it is the newer.
So a request carrying a platform cookie name (as this gateway reads it) twice is refused, in
every mode and on every host, with a 400 page that explains and links to a clearing address
(`CLEAR_COOKIES_PATH`, on the platform host `PLATFORM_CLEAR_COOKIES_PATH`). That address
answers `Clear-Site-Data: "cookies"` (Chromium clears the whole site's cookies, whatever their
Domain and Path) plus an expired Set-Cookie for each name on this host and each parent domain
(for browsers without Clear-Site-Data), then sends the browser on to `/`. It clears only for a
request that does carry a cookie twice, so a link from elsewhere cannot sign anyone out.
With Secure cookies the names are `__Host-` ones, which browsers refuse from other hosts: the
refusal then only stands guard.
"""

from __future__ import annotations

import logging

from aiohttp import web

from userland.auth.rules.origins import CookieNames, parent_domains, read_names, repeated_cookie

log = logging.getLogger(__name__)

# Every name the gateway reads contains this: fewer than two of it and nothing can repeat.
_MARK = "userland_"


class RepeatedCookies:
    """`check(request)`: the platform cookie name sent twice, or None. The answer is remembered
    per Cookie header value (a browser sends the same one each time; bounded)."""

    def __init__(self, names: CookieNames, *, max_headers: int = 1024) -> None:
        self.names = names
        self._read = frozenset(read_names(names))
        self._memo: dict[str, str | None] = {}
        self._max_headers = max_headers

    def check(self, request: web.Request) -> str | None:
        headers = request.headers.getall("Cookie", ())
        if not headers:
            return None
        if len(headers) > 1:  # no browser splits its cookies; a script might
            return repeated_cookie(headers, self._read)
        raw = headers[0]
        if raw.count(_MARK) < 2:
            return None
        try:
            return self._memo[raw]
        except KeyError:
            pass
        found = repeated_cookie(headers, self._read)
        if len(raw) <= 4096:
            if len(self._memo) >= self._max_headers:
                self._memo.clear()
            self._memo[raw] = found
        return found

    def clear(self, request: web.Request, host: str, *, secure: bool) -> web.Response:
        """The clearing address: clears this browser's platform cookies if it sent one twice,
        and goes on to `/` either way."""
        response = web.Response(status=303, headers={"Location": "/", "Cache-Control": "no-store"})
        if self.check(request) is None:
            return response
        log.info("repeated platform cookies cleared", extra={"event": "gateway.cookies_cleared",
                                                             "host": host})
        response.headers["Clear-Site-Data"] = '"cookies"'
        attributes = "; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax" + (
            "; Secure" if secure else "")
        for name in sorted(self._read):
            if name.startswith("__Host-"):  # host-only, Path=/ by definition
                response.headers.add("Set-Cookie", f"{name}=; Path=/{attributes}")
                continue
            for path in ("/", "/auth/"):
                response.headers.add("Set-Cookie", f"{name}=; Path={path}{attributes}")
                for domain in parent_domains(host):
                    response.headers.add("Set-Cookie", f"{name}=; Domain={domain}; Path={path}{attributes}")
        return response
