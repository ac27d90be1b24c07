"""What a member of staff gets on a student's origin once the help grant that let them in has
ended (proxy/rules/decision.py `GRANT_ENDED`): refused, told who ended it and when, and their
browser asked to drop what it keeps of the student's origin."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from userland.auth.rules.origins import CookieNames
from userland.platform.model.grants import Grant
from userland.platform.model.settings import Settings
from userland.proxy.grant_watch import LiveGrants
from userland.proxy.pages import Pages, help_end_words
from userland.proxy.request_kinds import wants_html
from userland.proxy.rules.routing import TemplateRoute
from userland.proxy.rules.vscode_frames import handshake_error
from userland.proxy.websocket import is_websocket_upgrade, refuse_vscode

log = logging.getLogger(__name__)

# What a staff member's browser is asked to drop of a student's origin once their help grant has
# ended. Not "cookies": Chromium applies it to the whole registrable domain, which would sign
# them out of the platform too when it shares one; the origin's own cookie is deleted by name.
HELP_CLEAR_SITE_DATA = '"cache", "storage", "executionContexts"'


class HelpEnded:
    def __init__(self, settings: Settings, pages: Pages, cookie_names: CookieNames,
                 grants: LiveGrants | None, handoff_url: Callable[[web.Request], str]) -> None:
        self.settings = settings
        self.pages = pages
        self.cookie_names = cookie_names
        self.grants = grants  # an ended grant's record: who ended it, and when
        self.handoff_url = handoff_url

    async def answer(self, request: web.Request, login: str, owner: str, route: TemplateRoute,
                     grant_id: str) -> web.StreamResponse:
        """A member of staff whose help grant has ended: refused, and what their browser keeps of
        the student's origin is cleared (service workers, caches, storage, other tabs), and its
        cookie, so nothing of the student's stays behind in a staff member's browser. The page
        says who ended it and when (the grant's record), so an open tab that reloads, or a
        reconnecting editor that gives up, lands on "alice ended your access at 14:19 UTC"."""
        websocket = is_websocket_upgrade(request)
        if websocket and route.activity.websocket_protocol == "vscode":
            # VS Code's workbench reconnects the moment the gateway closes its socket: refused
            # in its own protocol it stops at once and offers to reload (onto the page below);
            # refused as HTTP it would retry for minutes while the tab looks normal.
            ended = await self._ended_grant(grant_id, login, owner)
            words = help_end_words(ended, owner) if ended is not None else "Your access has ended."
            return await refuse_vscode(request, handshake_error(f"{words} Reload this page."))
        if not wants_html(request) or websocket:
            # A tab's own request: refused, and the browser asked to clear (best effort: a
            # service worker may stand between); the cookie stays for the page load that follows.
            return web.Response(status=401, text="help access ended\n", headers={
                "Cache-Control": "no-store", "Clear-Site-Data": HELP_CLEAR_SITE_DATA})
        # Joined again since (a new grant): a page load signs this origin in afresh through the
        # handoff (bound to the new grant), as a first visit would, not "your access has ended".
        if await self._joined_again(route.namespace, owner, login, grant_id):
            return web.Response(status=302, headers={"Location": self.handoff_url(request),
                                                     "Cache-Control": "no-store"})
        # A page load (top level: browsers honour Clear-Site-Data there): the page that says so,
        # the origin's data cleared, and its cookie deleted.
        ended = await self._ended_grant(grant_id, login, owner)
        course_url = f"{self.settings.public_url}/courses/{route.namespace}"
        response = self.pages.help_ended(login, owner, course_url, ended)
        response.headers["Clear-Site-Data"] = HELP_CLEAR_SITE_DATA
        response.del_cookie(self.cookie_names.origin, path="/", secure=self.settings.cookie_secure,
                            httponly=True, samesite="Lax")
        return response

    async def _joined_again(self, course: str, owner: str, login: str, ended_id: str) -> bool:
        """A live grant other than the one that ended (the ended one's Redis key can outlive
        its end by a moment: that is not a new grant, and the page must say it ended)."""
        if self.grants is None:
            return False
        try:
            live = await self.grants.live_for(course, owner, login)
            return live is not None and live.id != ended_id
        except Exception as err:  # Redis gone: the ended page (fail closed)
            log.warning("live grant not read", extra={"error": type(err).__name__})
            return False

    async def _ended_grant(self, grant_id: str, login: str, owner: str) -> Grant | None:
        """The record of the ended grant a staff member's session was bound to (who ended it,
        when), or None when it cannot be read."""
        if not grant_id or self.grants is None:
            return None
        try:
            ended = await self.grants.record(grant_id)
        except Exception as err:  # Redis gone: the page says it ended, without who and when
            log.warning("ended grant not read", extra={"error": type(err).__name__})
            return None
        if ended is None or ended.staff != login or ended.student != owner:
            return None  # never another grant's story
        return ended
