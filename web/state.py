"""The web UI's own watches: which namespaces are courses, and what is in each course.

One cluster-wide informer on namespaces labelled `userland.dev/course=true`; per course, one
informer each for Userlands, Templates, Deployments, Pods, Events and Assignments of that
namespace, started when the course appears and stopped when it goes. Objects are cut down
(web/rules/slim.py) and kept compact, so 1,000 Userlands cost little memory. A namespace the web UI may not
read (no RoleBinding yet: 403) is "not set up": it is probed again every `probe_interval` seconds and
never stops the others.

Every change is reduced to the students it touches and passed to the `Notifier`, which tells
the live dashboards once per tick. Rows are built lazily from the cache (web/rules/dashboard.py) and
memoized per student until one of that student's objects changes: a page render of 500
students makes no API call and rebuilds only what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Literal

from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import (
    ASSIGNMENTS,
    DEPLOYMENTS,
    EVENTS,
    JSON,
    NAMESPACES,
    PODS,
    TEMPLATES,
    USERLANDS,
    KubeClient,
    KubeError,
)
from userland.platform.model import naming
from userland.platform.model.objects import labels_of, meta
from userland.web.notifier import EVERYTHING, Notifier
from userland.web.rules import dashboard, slim
from userland.web.rules.courses import Course, being_deleted

log = logging.getLogger(__name__)

WatchStatus = Literal["starting", "ready", "not_set_up", "degraded"]
STATE = "userland.class_state"  # WebContext.extras key for the ClassState
AssignmentHook = Callable[[str, JSON | None, JSON | None], None]  # (namespace, old, new)


# Index names on a course's informers.
BY_USER = "user"              # Userlands by their student's login
BY_OWNED_NAME = "owned-name"  # Userlands by their own name and their Deployment's
BY_USERLAND = "userland"      # Pods by their Userland's label value
BY_INVOLVED = "involved"      # Warning Events by the object they are about (see _involved)


def assignments_channel(namespace: str) -> str:
    """The notifier's channel for a course's Assignments (keys: assignment names)."""
    return f"{namespace}#assignments"


def _user(obj: JSON | None) -> str:
    return naming.login_of(((obj or {}).get("spec") or {}).get("user"))


def _deployment(userland: JSON) -> str:
    """The name of the Deployment the operator makes for this Userland."""
    template = str((userland.get("spec") or {}).get("template") or "")
    try:
        return naming.deployment_name(template, _user(userland))
    except naming.InvalidName:
        return str(meta(userland).get("name") or "")


def _owned_names(userland: JSON) -> list[str]:
    return [str(meta(userland).get("name") or ""), _deployment(userland)]


def _warning_about(event: JSON) -> list[str]:
    return [_involved(event)] if event.get("type") == "Warning" else []


def _involved(event: JSON) -> str:
    """The name a Warning Event is found under: its Deployment's for a ReplicaSet's or a Pod's
    (`<deployment>-<replicaset hash>[-<pod suffix>]`), so it is found even after the Pod is gone."""
    involved = event.get("involvedObject") or {}
    name = str(involved.get("name") or "")
    kind = involved.get("kind")
    if kind == "ReplicaSet":
        return name.rsplit("-", 1)[0]
    if kind == "Pod":
        return name.rsplit("-", 2)[0]
    return name


class CourseWatch:
    """The cached objects of one course namespace, with indices by student and by Userland."""

    def __init__(self, kube: KubeClient, namespace: str, notifier: Notifier, *,
                 probe_interval: float = 30.0, sync_deadline: float = 20.0,
                 assignment_hooks: list[AssignmentHook] | None = None) -> None:
        self.kube = kube
        self.assignment_hooks = assignment_hooks if assignment_hooks is not None else []
        self.namespace = namespace
        self.notifier = notifier
        self.probe_interval = probe_interval
        self.sync_deadline = sync_deadline
        self.status: WatchStatus = "starting"
        self.problem = ""

        def informer(resource: Any, transform: Any, selector: str | None = None) -> Informer:
            return Informer(kube, resource, [namespace], transform=transform, compact=True,
                            label_selector=selector)

        managed = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
        self.userlands = informer(USERLANDS, slim.userland)
        self.templates = informer(TEMPLATES, slim.template)
        self.deployments = informer(DEPLOYMENTS, slim.deployment, managed)
        self.pods = informer(PODS, slim.pod, managed)
        self.events = informer(EVENTS, slim.event)
        self.assignments = informer(ASSIGNMENTS, slim.assignment)
        self.informers = (self.userlands, self.templates, self.deployments, self.pods, self.events,
                          self.assignments)
        # Indexes on the informers (kept by them, before any handler runs).
        self.userlands.add_index(BY_USER, lambda obj: [_user(obj)])
        self.userlands.add_index(BY_OWNED_NAME, _owned_names)
        self.pods.add_index(BY_USERLAND, lambda obj: [labels_of(obj).get(naming.LABEL_USERLAND, "")])
        self.events.add_index(BY_INVOLVED, _warning_about)
        self._rows: dict[str, dashboard.StudentRow] = {}
        self.userlands.add_handler(self._on_userland)
        self.templates.add_handler(self._on_template)
        self.deployments.add_handler(self._on_deployment)
        self.pods.add_handler(self._on_pod)
        self.events.add_handler(self._on_event)
        self.assignments.add_handler(self._on_assignment)

    # ---- change handlers: keep the indices, forget cached rows, tell the notifier ----
    def _touch(self, logins: Iterable[str]) -> None:
        logins = {login for login in logins if login}
        for login in logins:
            self._rows.pop(login, None)
        if logins:
            self.notifier.changed(self.namespace, logins)

    def _touch_all(self) -> None:
        self._rows.clear()
        self.notifier.changed(self.namespace, {EVERYTHING})

    def _on_userland(self, old: JSON | None, new: JSON | None) -> None:
        self._touch({_user(old), _user(new)})

    def _on_template(self, old: JSON | None, new: JSON | None) -> None:
        self._touch_all()  # titles and storage policies show on every row

    def _on_deployment(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old or {}
        login = labels_of(obj).get(naming.LABEL_USER) or self._owner(str(meta(obj).get("name") or ""))
        self._touch({str(login)})

    def _on_pod(self, old: JSON | None, new: JSON | None) -> None:
        self._touch({str(labels_of(new or old).get(naming.LABEL_USER) or "")})

    def _owner(self, name: str) -> str:
        """The student whose Userland (or its Deployment) has this name ('' when none does)."""
        owners = self.userlands.by_index(BY_OWNED_NAME, name)
        return _user(owners[0]) if owners else ""

    def _on_event(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old or {}
        if obj.get("type") == "Warning":
            self._touch({self._owner(_involved(obj))})

    def _on_assignment(self, old: JSON | None, new: JSON | None) -> None:
        # Assignment pages listen on their own channel: a status write of a 500-student table
        # re-renders that table, not the class dashboard's rows.
        name = str(meta(new or old).get("name") or "")
        self.notifier.changed(assignments_channel(self.namespace), {name})
        for hook in self.assignment_hooks:  # e.g. the LMS gradebook's passback (web/lti_sync.py)
            hook(self.namespace, old, new)

    def assignment_objects(self) -> list[JSON]:
        return self.assignments.items()

    def assignment(self, name: str) -> JSON | None:
        return self.assignments.get(self.namespace, name)

    # ---- reads ----
    def _warnings_for(self, names: Iterable[str]) -> list[JSON]:
        return [event for name in names for event in self.events.by_index(BY_INVOLVED, name)]

    def template_objects(self) -> dict[str, JSON]:
        return {str(meta(t).get("name")): t for t in self.templates.items()}

    def row(self, login: str, templates: dict[str, JSON] | None = None) -> dashboard.StudentRow | None:
        cached = self._rows.get(login)
        if cached is not None:
            return cached
        userlands = self.userlands.by_index(BY_USER, login)
        if not userlands:
            return None
        templates = self.template_objects() if templates is None else templates
        envs = []
        for obj in userlands:
            name = str(meta(obj).get("name"))
            pods = self.pods.by_index(BY_USERLAND, naming.label_value(name))
            pod_names = {str(meta(p).get("name")) for p in pods}
            events = self._warnings_for({name, _deployment(obj), *pod_names})
            template = templates.get(str((obj.get("spec") or {}).get("template") or ""))
            envs.append(dashboard.environment(obj, template, pods, events))
        row = dashboard.student_row(login, userlands, envs)
        self._rows[login] = row
        return row

    def rows(self) -> list[dashboard.StudentRow]:
        logins = [str(login) for login in self.userlands.indexed_values(BY_USER)]
        templates = self.template_objects() if any(u not in self._rows for u in logins) else {}
        rows = (self.row(login, templates) for login in logins)
        return [r for r in rows if r is not None]

    def userland_names(self) -> set[str]:
        return {name for _, name in self.userlands.object_keys()}

    # ---- lifecycle ----
    async def _probe(self) -> bool:
        """Whether the web UI may read this namespace (403/401: not set up yet)."""
        try:
            await self.kube.request("GET", USERLANDS.path(self.namespace), query={"limit": "1"})
        except KubeError as err:
            if err.status in (401, 403):
                if self.status != "not_set_up":
                    log.warning("course namespace not readable", extra={"namespace": self.namespace})
                self.status, self.problem = "not_set_up", "the web UI may not read this namespace"
            else:
                self.problem = str(err.reason or "the cluster is not answering")
            return False
        return True

    async def run(self) -> None:
        while not await self._probe():  # noqa: ASYNC110 (polling the API server: no event to wait for)
            await asyncio.sleep(self.probe_interval)
        runs = [asyncio.create_task(i.run()) for i in self.informers]
        waits = [asyncio.create_task(i.wait_synced()) for i in self.informers]
        try:
            _, pending = await asyncio.wait(waits, timeout=self.sync_deadline)
            if pending:
                # Partly readable (a Role without Events, say): show what there is, say so to admins.
                self.status, self.problem = "degraded", "some objects of this course cannot be read"
            else:
                self.status, self.problem = "ready", ""
            self._touch_all()
            await asyncio.gather(*runs)
        finally:
            for task in (*runs, *waits):
                task.cancel()
            await asyncio.gather(*runs, *waits, return_exceptions=True)


class ClassState:
    """Every course the web UI can see; implements web/access.py's CourseDirectory."""

    def __init__(self, kube: KubeClient, *, tick: float = 0.25, probe_interval: float = 30.0) -> None:
        self.kube = kube
        self.notifier = Notifier(tick)
        self.probe_interval = probe_interval
        self.namespaces = Informer(kube, NAMESPACES, label_selector=f"{naming.LABEL_COURSE}=true",
                                   transform=slim.namespace, compact=True)
        self.namespaces.add_handler(self._on_namespace)
        self.watches: dict[str, CourseWatch] = {}
        # Called with (namespace, old, new) on every Assignment change any course watch sees.
        self.assignment_hooks: list[AssignmentHook] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: list[asyncio.Task[None]] = []

    def _on_namespace(self, old: JSON | None, new: JSON | None) -> None:
        name = str(meta(new or old).get("name") or "")
        if being_deleted(new):
            new = None  # a course being deleted is gone for its pages now, not once emptied
        if new is not None and name not in self.watches:
            watch = CourseWatch(self.kube, name, self.notifier, probe_interval=self.probe_interval,
                                assignment_hooks=self.assignment_hooks)
            self.watches[name] = watch
            self._tasks[name] = asyncio.create_task(watch.run(), name=f"course-watch-{name}")
            log.info("watching course", extra={"namespace": name})
        elif new is None and name in self.watches:
            del self.watches[name]
            self._tasks.pop(name).cancel()
            self.notifier.changed(name, {EVERYTHING})
            log.info("course gone", extra={"namespace": name})

    def reprobe(self, namespace: str) -> CourseWatch | None:
        """A course set up a moment ago (its RoleBinding made after its namespace appeared, as the
        operator makes a new course): look again now, not after `probe_interval`."""
        watch = self.watches.get(namespace)
        if watch is None or watch.status != "not_set_up":
            return watch
        self._tasks.pop(namespace).cancel()
        watch = CourseWatch(self.kube, namespace, self.notifier, probe_interval=self.probe_interval)
        self.watches[namespace] = watch
        self._tasks[namespace] = asyncio.create_task(watch.run(), name=f"course-watch-{namespace}")
        return watch

    async def start(self) -> None:
        self._background = [asyncio.create_task(self.namespaces.run(), name="course-namespaces"),
                            asyncio.create_task(self.notifier.run(), name="course-notifier")]

    async def stop(self) -> None:
        self.notifier.close_all()
        tasks = [*self._background, *self._tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self.watches.clear()

    @property
    def synced(self) -> bool:
        """The course list is known and every course is loaded (or known to be unreadable)."""
        return self.namespaces.synced and all(w.status != "starting" for w in self.watches.values())

    async def wait_synced(self, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while not self.synced:  # noqa: ASYNC110 (a condition over many informers)
                await asyncio.sleep(0.05)

    # ---- CourseDirectory ----
    def course(self, namespace: str) -> Course | None:
        obj = self.namespaces.get("", namespace)
        return None if obj is None or being_deleted(obj) else Course.from_namespace(obj)

    def courses(self) -> list[Course]:
        return sorted((Course.from_namespace(o) for o in self.namespaces.items() if not being_deleted(o)),
                      key=lambda c: (c.title.lower(), c.namespace))

    def watch(self, namespace: str) -> CourseWatch | None:
        return self.watches.get(namespace)

    def environments_of(self, login: str) -> list[tuple[Course, dashboard.StudentRow]]:
        """A student's rows in every course (for "my environments")."""
        found = []
        for course in self.courses():
            watch = self.watches.get(course.namespace)
            row = watch.row(login) if watch is not None else None
            if row is not None:
                found.append((course, row))
        return found


@contextlib.asynccontextmanager
async def running(kube: KubeClient, **kwargs: Any) -> Any:
    """A started ClassState, stopped on exit (for tests and benchmarks)."""
    state = ClassState(kube, **kwargs)
    await state.start()
    try:
        yield state
    finally:
        await state.stop()

