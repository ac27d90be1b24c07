"""What the gateway answers itself on a student's origin (`alice.ide.example.edu/__userland/...`).

- `/__userland/handoff?code=...&next=/path`: the end of a handoff (auth/handoff.py has the
  platform's half): the single-use code becomes this origin's own session, in a host-only cookie,
  and the browser goes on to `next` (a path on this origin only);
- `/__userland/signed-out?chain=...&step=N`: one step of a sign-out: `Clear-Site-Data` for this
  origin, the origin cookie deleted, and on to the next origin (or the platform's last step).
  Without a live chain naming this origin at that step it clears nothing and shows a page;
- anything else under `/__userland/` is a 404: the prefix is the gateway's, never the
  environment's.
"""

from __future__ import annotations

import logging
from collections import Counter
from urllib.parse import urlencode

from aiohttp import web

from userland.auth.origin_sessions import OriginSessions
from userland.auth.rules.origins import CLEAR_SITE_DATA, HANDOFF_PATH, SIGNED_OUT_PATH, safe_path
from userland.platform.model.settings import Settings
from userland.proxy.pages import Pages

log = logging.getLogger(__name__)

NO_STORE = {"Cache-Control": "no-store"}


def _redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location, **NO_STORE})


class OriginEndpoints:
    def __init__(self, settings: Settings, sessions: OriginSessions, pages: Pages, cookie: str) -> None:
        self.settings = settings
        self.sessions = sessions
        self.pages = pages
        self.cookie = cookie
        self.handoffs: Counter[str] = Counter()  # by outcome: ok, expired (/metrics)

    async def handle(self, request: web.Request, origin: str) -> web.StreamResponse:
        # GET only: a HEAD (a link checker, a prefetch) must not use up a handoff code.
        if request.method != "GET":
            return self.pages.error(405, "Not allowed", "This address cannot be used that way.")
        if request.path == HANDOFF_PATH:
            return await self.handoff(request, origin)
        if request.path == SIGNED_OUT_PATH:
            return await self.signed_out(request, origin)
        return self.pages.not_found()

    async def handoff(self, request: web.Request, origin: str) -> web.StreamResponse:
        redeemed = await self.sessions.redeem(request.query.get("code"), origin)
        if redeemed is None:
            self.handoffs["expired"] += 1
            return self.pages.error(403, "Sign-in link expired",
                                    "This sign-in link has expired or was already used.",
                                    link_url="/", link_text="Open your environment")
        cookie_id, next_path = redeemed
        self.handoffs["ok"] += 1
        response = _redirect(safe_path(next_path))
        response.set_cookie(self.cookie, cookie_id, max_age=self.settings.session_ttl_seconds, path="/",
                            secure=self.settings.cookie_secure, httponly=True, samesite="Lax")
        return response

    async def signed_out(self, request: web.Request, origin: str) -> web.StreamResponse:
        chain_id = request.query.get("chain")
        chain = await self.sessions.signout(chain_id)
        try:
            step = int(request.query.get("step", ""))
        except ValueError:
            step = -1
        if chain is None or chain_id is None or not 0 <= step < len(chain.origins) \
                or chain.origins[step] != origin:
            return self.pages.error(200, "Signed out", "You are signed out of this environment.",
                                    link_url=self.settings.public_url + "/", link_text="Continue")
        if step + 1 < len(chain.origins):
            onward = f"{chain.origins[step + 1]}{SIGNED_OUT_PATH}?" + urlencode(
                {"chain": chain_id, "step": str(step + 1)})
        else:
            onward = f"{self.settings.public_url}/auth/signed-out?" + urlencode({"chain": chain_id})
        response = _redirect(onward)
        response.headers["Clear-Site-Data"] = CLEAR_SITE_DATA
        response.del_cookie(self.cookie, path="/", secure=self.settings.cookie_secure, httponly=True,
                            samesite="Lax")
        log.info("origin signed out", extra={"event": "logout.origin", "login": chain.login})
        return response
