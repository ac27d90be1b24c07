"""What a request to an environment that is not answering gets: asleep, waking or starting.

A WebSocket is closed at once (and wakes nothing: editors reconnect in loops); a page
navigation gets the waking page, which shows how far the environment has come; anything else a
503 with Retry-After. A request that is the student using it (not a tab polling) wakes it.
"""

from __future__ import annotations

from aiohttp import web

from userland.platform.model.storage_words import Storage
from userland.proxy.activity import ActivityTracker, counts_as_use
from userland.proxy.metrics import GatewayMetrics
from userland.proxy.pages import STARTING_WORDS, Pages
from userland.proxy.request_kinds import NOT_READY, wants_html
from userland.proxy.routes_cache import RoutingCache, UserlandState
from userland.proxy.rules.routing import TemplateRoute
from userland.proxy.rules.wake_times import wake_words
from userland.proxy.websocket import refuse_websocket


class Waiting:
    def __init__(self, routes: RoutingCache, pages: Pages, metrics: GatewayMetrics,
                 activity: ActivityTracker) -> None:
        self.routes = routes
        self.pages = pages
        self.metrics = metrics
        self.activity = activity

    async def not_running(self, request: web.Request, route: TemplateRoute, userland: UserlandState,
                          name: str, login: str, *, websocket: bool) -> web.StreamResponse:
        """Its environment is asleep, waking or starting. A WebSocket is closed at once (and
        wakes nothing: editors reconnect in loops); a page shows how far it has come; a request
        that is the student using it (not a tab polling) wakes it."""
        asleep = userland.phase == "Idle"
        if not websocket:
            if userland.phase not in ("Idle", "Starting", "Pending"):
                return self.pages.for_phase(userland.phase, name, login, route.storage)
            if counts_as_use(request.method, request.path, route.activity):
                if asleep and await self.activity.wake(userland.namespace, userland.name):
                    self.metrics.wake_requested(userland.namespace)
                elif route.idle_timeout_seconds is not None:
                    # Waiting for it (the waking page's reloads) is using it: a student in a long
                    # wake line must not fall asleep again before their turn.
                    self.activity.touch(userland.namespace, userland.name, route.idle_timeout_seconds)
        return await self.wait_page(request, userland, name, login, websocket=websocket, asleep=asleep,
                                    storage=route.storage)

    async def wait_page(self, request: web.Request, userland: UserlandState, name: str, login: str, *,
                        websocket: bool, asleep: bool, storage: Storage = "unknown") -> web.StreamResponse:
        """What a request to an environment that is not answering yet gets: a WebSocket is
        closed at once (4503), a page navigation the waking page (200), anything else a 503."""
        self.metrics.waiting_answer(userland.namespace)
        if websocket:
            return await refuse_websocket(request, f"{name} is not running: reload the page to "
                                                   f"{'wake' if asleep else 'open'} it")
        if not wants_html(request):
            advice = "Open it in the browser to wake it." if asleep else "Try again in a moment."
            state = "asleep" if asleep else "starting"
            request[NOT_READY] = True  # a designed answer (Retry-After), not a failure
            return self.pages.error(503, f"{name} is {state}", advice, retry=True)
        waking = asleep or userland.reason == "Waking"
        expect = wake_words(self.routes.wake_times.recent(userland.namespace, userland.template), name)
        return self.pages.waking(name, login, steps=userland.progress, waking=waking, storage=storage,
                                 expect=expect if waking else STARTING_WORDS)
