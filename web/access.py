"""Who may open a course page or run an action: the course from its namespace, then the rules.

`require_course` is the one gate every course route passes. It looks the namespace up (from
the watch cache when the app has one: `CourseDirectory`, else one API call), refuses anything
that is not a course with the same 404 page whether the namespace exists or not (no probing
of namespace names), and refuses a role without the permission with a 403 page.

A namespace that is not a course is remembered as such for `MISS_SECONDS` (`Misses`): one
student asking 600 times for a made-up course cost 600 namespace GETs, now one every few
seconds. A course made a moment ago may answer 404 for those few seconds (the watch cache
usually has it sooner).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

from aiohttp import web

from userland.platform.clients.kube import NAMESPACES, NotFound
from userland.platform.model import naming
from userland.web.context import COURSE_DIRECTORY, identity_of, web_context
from userland.web.rules.courses import Action, Course, CourseRole, being_deleted, course_role, may


class CourseDirectory(Protocol):
    """Where courses come from (the app's watch cache implements it)."""

    def course(self, namespace: str) -> Course | None: ...


DIRECTORY = COURSE_DIRECTORY  # WebContext.extras key for a CourseDirectory
MISSES = "userland.course_misses"  # WebContext.extras key for the Misses
MISS_SECONDS = 5.0


class Misses:
    """Namespaces known not to be courses, each for `seconds`; at most `most` of them (the
    oldest forgotten first), so made-up names cannot grow it without bound."""

    def __init__(self, seconds: float = MISS_SECONDS, most: int = 10_000) -> None:
        self.seconds = seconds
        self.most = most
        self._until: OrderedDict[str, float] = OrderedDict()

    def known(self, namespace: str, now: float) -> bool:
        until = self._until.get(namespace)
        if until is None:
            return False
        if now >= until:
            del self._until[namespace]
            return False
        return True

    def remember(self, namespace: str, now: float) -> None:
        self._until.pop(namespace, None)
        self._until[namespace] = now + self.seconds
        while len(self._until) > self.most:
            self._until.popitem(last=False)


_RAISABLE: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest, 403: web.HTTPForbidden, 404: web.HTTPNotFound, 409: web.HTTPConflict,
    503: web.HTTPServiceUnavailable,
}


def Refused(response: web.Response) -> web.HTTPException:
    """A rendered error page as an exception, to leave a handler from deep inside it."""
    return _RAISABLE[response.status](text=response.text, content_type="text/html",
                                      headers={"Cache-Control": "no-store"})


async def find_course(request: web.Request, namespace: str) -> Course | None:
    ctx = web_context(request)
    if not naming.is_valid_dns_label(namespace):
        return None
    directory: CourseDirectory | None = ctx.extras.get(DIRECTORY)
    if directory is not None:
        course: Course | None = directory.course(namespace)
        if course is not None:
            return course
        # A miss may be a course made a moment ago that the watch has not seen yet: ask once.
    misses: Misses = ctx.extras.setdefault(MISSES, Misses())
    now = time.monotonic()
    if misses.known(namespace, now):
        return None
    assert ctx.kube is not None
    try:
        obj = await ctx.kube.get(NAMESPACES, None, namespace)
    except NotFound:
        misses.remember(namespace, now)
        return None
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(naming.LABEL_COURSE) != "true" or being_deleted(obj):
        misses.remember(namespace, now)
        return None
    return Course.from_namespace(obj)


async def require_course(request: web.Request, namespace: str, action: Action,
                         why: str = "do this") -> tuple[Course, CourseRole]:
    """The course and the caller's role in it, or raise a 404/403 page (`why`: what the caller
    tried, in words, for that page)."""
    ctx = web_context(request)
    who = identity_of(request)
    course = await find_course(request, namespace)
    role = course_role(who, course) if course is not None else None
    if course is None or role is None:
        raise Refused(ctx.error(request, 404, "No such course",
                                "There is no course here that you teach or assist. Check the link, or "
                                "ask the course's instructor to add you as staff."))
    if not may(role, action):
        raise Refused(ctx.error(request, 403, "Not allowed",
                                f"As {'an' if role[0] in 'aeiou' else 'a'} {role} of {course.title} you "
                                f"cannot {why}. Ask an instructor of the course."))
    return course, role
