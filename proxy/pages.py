"""The gateway's own pages: starting, suspended, no environment (403), and error pages, and the
security headers every response the gateway makes itself carries.

Rendered from jinja2 templates in `proxy/templates/` with autoescape on; every page is a
complete response (status, Cache-Control: no-store), never a traceback.

`OWN_RESPONSE_HEADERS` go on everything the gateway answers itself (its pages, the auth pages,
redirects), never on what an environment or the web UI answers (they set their own; IDEs need
frames and scripts). The Content-Security-Policy allows no script at all and exactly the two
stylesheets of the gateway's and the auth pages' base templates, by hash: no inline code can
run even if something got injected; nothing may frame the pages (clickjacking). The style is the
shared look of every Userland page (platform/model/look.py), so these pages look like the web UI.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from userland.platform.model import look, storage_words
from userland.platform.model.grants import Grant

RETRY_SECONDS = 5


def help_end_words(grant: Grant, owner: str) -> str:
    """Who ended a help grant and when, for the member of staff it let in: "alice ended your
    access at 14:19 UTC." (these pages run no script: the time is said in UTC)."""
    at = datetime.fromtimestamp(grant.until, UTC).strftime("%H:%M UTC")
    reason = grant.end_reason
    if reason == "student":
        return f"{owner} ended your access at {at}."
    if reason == "done":
        return f"You left {owner}'s environment at {at}."
    if reason == "ended" and grant.ended_by:
        return f"{grant.ended_by} ended your access at {at}."
    if reason == "staff-removed":
        return f"Your access ended at {at}: you are no longer staff of the course."
    if reason == "policy":
        return f"Your access ended at {at}: the course no longer lets staff open environments unasked."
    if reason == "course-gone":
        return f"Your access ended at {at}: the course was removed."
    return f"Your time to help ran out at {at}."
# Said by the apps' own error dialogs (JupyterLab's "File Save Error ..."): a student who signs in
# again in another tab finds this one working again, with nothing lost.
SIGNED_OUT_MESSAGE = ("You are signed out of Userland. To keep working here, open this address in a new tab "
                      "and sign in: this tab then saves and runs again, with nothing lost.")


CONTENT_SECURITY_POLICY = (
    # The gateway's and the sign-in pages' one inline style (platform/model/look.py), by its hash.
    f"default-src 'none'; style-src {look.style_hash(look.GATEWAY_STYLE)}; img-src 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
OWN_RESPONSE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Handoff codes and sign-out chains travel in URLs: never in a Referer to another origin.
    # (Not no-referrer: with it, browsers send `Origin: null` on the pages' own form posts.)
    "Referrer-Policy": "same-origin",
}


# The steps a waking environment goes through (the operator's status.progress), for students.
WAKE_STEPS = (("Scheduled", "Finding a place to run it"), ("ImagePulled", "Getting the software ready"),
              ("ContainerStarted", "Starting it"), ("Ready", "Almost there: opening it"))
WAKE_REFRESH_SECONDS = 2
# A first start (not timed by the gateway): the same steps as a wake, measured with `make run` at
# 8-11 s to a usable app (issue 24; README "make run with the real apps": the app itself answers
# 1-3 s after its Userland is made, the browser's loading of it comes on top).
STARTING_WORDS = "Starting usually takes about 10 seconds, longer when many start at once."


class Pages:
    def __init__(self, public_url: str = "") -> None:
        self.public_url = public_url  # the topbar's links go to the platform (its overview, /me)
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("userland.proxy", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def render(self, name: str, *, status: int, headers: dict[str, str] | None = None,
               **context: Any) -> web.Response:
        context.setdefault("refresh", None)
        context.setdefault("user", "")
        body = self._env.get_template(name).render(style=look.GATEWAY_STYLE, home=self.public_url, **context)
        response = web.Response(text=body, status=status, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        for key, value in (headers or {}).items():
            response.headers[key] = value
        return response

    # Students read these pages: the app's own name ("Starting your VS Code"), plain words, no
    # cluster terms and no message from the cluster (staff see those in the web UI and kubectl).
    # tests/proxy/test_student_pages.py renders each one and checks a list of jargon words.

    def for_phase(self, phase: str, template_name: str, user: str,
                  storage: storage_words.Storage = "unknown") -> web.Response:
        """The page for an environment that is not ready, by its Userland's phase."""
        if phase == "Suspended":
            return self.suspended(template_name, user, storage)
        if phase == "Failed":
            return self.cannot_start(template_name, user)
        return self.starting(template_name, user, waking=phase == "Idle")

    def starting(self, template_name: str, user: str, *, waking: bool = False) -> web.Response:
        title = f"{'Waking up' if waking else 'Starting'} your {template_name}"
        return self.render("starting.html", status=503, title=title, template_name=template_name,
                           user=user, refresh=RETRY_SECONDS, headers={"Retry-After": str(RETRY_SECONDS)})

    def waking(self, template_name: str, user: str, *, steps: tuple[str, ...], waking: bool,
               storage: storage_words.Storage = "unknown", expect: str = "") -> web.Response:
        """Asleep, waking or starting: how far it has come, in words. 200, not 503: when a whole
        class arrives at once every student gets this page, and nothing has failed (docs/sleep.md).
        It reloads itself every couple of seconds and then shows the environment itself, at the
        address the student asked for."""
        reached = set(steps)
        rows = [(label, step in reached) for step, label in WAKE_STEPS]
        current = next((i for i, (_, done) in enumerate(rows) if not done), len(rows))
        title = f"{'Waking up' if waking else 'Starting'} your {template_name}"
        # What happened to the files while it slept: the same source as the web UI's pages.
        files = storage_words.for_student("asleep", storage) if waking else ""
        return self.render("waking.html", status=200, title=title, template_name=template_name,
                           user=user, rows=rows, current=current, waking=waking, files=files,
                           refresh=WAKE_REFRESH_SECONDS, expect=expect or STARTING_WORDS)

    def suspended(self, template_name: str, user: str,
                  storage: storage_words.Storage = "unknown") -> web.Response:
        return self.render("suspended.html", status=503, title=f"Your {template_name} is paused",
                           template_name=template_name, user=user, refresh=30,
                           files=storage_words.for_student("suspended", storage),
                           headers={"Retry-After": "30"})

    def cannot_start(self, template_name: str, user: str) -> web.Response:
        return self.render("cannot_start.html", status=503,
                           title=f"Your {template_name} cannot start right now", user=user,
                           message="Something in how it is set up keeps it from starting.",
                           refresh=30, headers={"Retry-After": "30"})

    def unreachable(self, template_name: str, user: str) -> web.Response:
        """Their environment's Template lost its route to another's (platform/model/routes.py)."""
        return self.render("cannot_start.html", status=503,
                           title=f"Your {template_name} cannot be opened here right now", user=user,
                           message="Two of your course's apps were given the same address, and the "
                                   "other one has it for now. Nothing of yours is lost; it opens here "
                                   "again once your instructor has it fixed.",
                           refresh=30, headers={"Retry-After": "30"})

    def forbidden(self, template_name: str, user: str, logout_url: str) -> web.Response:
        return self.render("forbidden.html", status=403, title=f"No {template_name} for you here yet",
                           template_name=template_name, user=user, logout_url=logout_url)

    def offer(self, template_name: str, user: str, csrf: str, action: str) -> web.Response:
        """Self-service: a button that creates the environment (a POST with a CSRF token)."""
        return self.render("create.html", status=200, title=f"Create your {template_name}",
                           template_name=template_name, user=user, csrf=csrf, action=action)

    def not_yours(self, user: str, own_url: str, owner: str = "") -> web.Response:
        if owner == user:  # their own address, with a cookie made for another one of theirs
            return self.error(403, "Signed in for another address",
                              "This page was sent the sign-in of another of your addresses. Open your "
                              "environment again to sign in here.", link_url=own_url,
                              link_text="Open your own environment", user=user)
        # Staff meet this page too, from a student's address on the class dashboard.
        whose = f"{owner}'s" if owner else "another student's"
        return self.error(403, f"This is {whose} environment",
                          f"Only {owner or 'that student'} can open it; you are signed in as {user}. "
                          f"Course staff can open it while helping, once {owner or 'the student'} "
                          "has asked for help.",
                          link_url=own_url, link_text="Open your own environment", user=user)

    def help_ended(self, user: str, owner: str, course_url: str, ended: Grant | None = None) -> web.Response:
        """A member of staff whose help grant has ended, on the student's origin: who ended it
        and when, from the grant's record (`ended`; None when it cannot be read)."""
        how = help_end_words(ended, owner) if ended is not None else (
            f"{owner} or the course's staff ended it, or its time ran out.")
        return self.error(403, f"Your access to {owner}'s environment has ended",
                          f"{how} What this browser kept of {owner}'s environment has been cleared. "
                          f"If {owner} still needs help, they can ask again.", link_url=course_url,
                          link_text="Back to the course", user=user)

    def help_embedded(self, user: str) -> web.Response:
        return self.error(403, "Open this environment in its own tab",
                          "While you help a student, their environment opens only as a page of its "
                          "own, never inside or from another site's page.", user=user)

    def help_nothing_here(self, template_name: str, user: str, owner: str) -> web.Response:
        return self.error(404, f"{owner} has no {template_name} here",
                          f"There is no {template_name} of {owner}'s at this address.", user=user)

    def error(self, status: int, title: str, message: str, *, retry: bool = False,
              link_url: str | None = None, link_text: str = "", user: str = "") -> web.Response:
        headers = {"Retry-After": str(RETRY_SECONDS)} if retry else None
        return self.render("error.html", status=status, title=title, message=message,
                           refresh=RETRY_SECONDS if retry else None, headers=headers,
                           link_url=link_url, link_text=link_text, user=user)

    def bad_gateway(self) -> web.Response:
        return self.error(502, "Your environment is not answering",
                          "It may be restarting. If this lasts, tell your instructor.", retry=True)

    def gateway_timeout(self) -> web.Response:
        return self.error(504, "Your environment took too long to answer",
                          "Try again in a moment.", retry=True)

    def platform_unavailable(self, kind: str, user: str = "", role: str = "") -> web.Response:
        """The platform's own pages (the web UI) are not answering: said to whoever is signed in
        (a teacher on a course page, a student on their list), not as "your environment"."""
        status, slow = (504, True) if kind == "timeout" else (502, False)
        title = "Userland's pages are taking too long" if slow else "Userland's pages are not answering"
        message = ("The course and environment pages are not answering for a moment. Environments keep "
                   "running: anything open in another tab is not affected.")
        if role == "admin":
            message += " As an admin: check the web UI (the userland-web Deployment) and its log."
        else:
            message += " If this lasts, tell whoever runs Userland for your school."
        return self.error(status, title, message, retry=True, user=user)

    def unavailable(self) -> web.Response:
        return self.error(503, "Sign-in is unavailable for a moment",
                          "Signing in cannot be checked right now. Try again in a moment.",
                          retry=True)

    def signed_out_background(self) -> web.Response:
        """What a tab left open after sign-out gets for its own requests on a student's origin.

        503 with Retry-After, not 401: apps treat 401 as final. JupyterLab declared the kernel
        dead ("Kernel died unexpectedly") when its kernel check got a 401, while a 503 makes it
        keep the kernel and try again (a reload signs the student in and finds it running). The
        JSON `message` is what JupyterLab (and other Jupyter clients) show in their error dialogs,
        so saving says why it failed and what to do."""
        return web.json_response(
            {"message": SIGNED_OUT_MESSAGE, "reason": "signed_out"}, status=503,
            headers={"Cache-Control": "no-store", "Retry-After": "10", "X-Userland-Signed-Out": "1"})

    def busy(self) -> web.Response:
        """This process could not get to the session store in time (a flood): this request only."""
        return self.error(429, "Too many requests right now",
                          "This site is very busy at the moment, or your network sent a great many "
                          "requests. Try again in a moment.", retry=True)

    def not_found(self) -> web.Response:
        return self.error(404, "Not found", "Nothing is served at this address.")
