"""A course with one environment in every state a class meets, for the action and filter tests.

Statuses are written as the operator writes them (status subresource); one environment is kept
"being removed" by a finalizer of the test's own, taken off again at the end.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from typing import Any

from tests.operator.support import userland_body
from tests.web.pages.support import INSTRUCTOR, AppFactory, Browserless, make_course, make_template
from tests.web.support import set_phase
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming

ACTIONS = "/courses/{}/actions"
KEEP = "tests.userland.dev/keep"  # a finalizer that keeps one environment "being removed"

# (login, template, suspended, phase, Ready reason): one environment in every state the class meets.
CLASS = [
    ("alice", "vscode", False, "Ready", "Available"),
    ("alice", "demo", False, "Idle", "Asleep"),
    ("bob", "vscode", True, "Suspended", "Suspended"),
    ("bob", "demo", False, "Ready", "Available"),
    ("carol", "vscode", False, "Starting", "Starting"),
    ("dave", "vscode", False, "Failed", "ImagePullBackOff"),
    ("erin", "vscode", False, None, ""),                       # no status yet
    ("frank", "gone", True, "Pending", "TemplateNotFound"),     # suspended, Template missing
    ("grace", "gone", False, "Pending", "TemplateNotFound"),
    ("heidi", "vscode", False, "Ready", "Available"),           # being removed (below)
]
REMOVING = naming.userland_name("vscode", "heidi")


def _all(pattern: str, page: str) -> list[str]:
    return [html.unescape(v) for v in re.findall(pattern, page)]


def shown_environments(page: str) -> set[str]:
    """The environments (Userland names) the dashboard's table shows."""
    return set(_all(r'<tr data-name="([^"]+)"', page))


def filter_values(page: str) -> list[str]:
    """Every value the dashboard's Status filter can send."""
    select = page[page.index('<select id="phase"'):]
    select = select[:select.index("</select>")]
    return _all(r'<option value="([^"]*)"', select)


def course_wide_fields(page: str) -> dict[str, str]:
    """The hidden fields the "whole course" form sends with its buttons."""
    form = page[page.index('class="card course-wide"'):]
    form = form[:form.index("</form>")]
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form))


def confirmation(page: str) -> tuple[set[str], set[str]]:
    """(every environment the confirmation page covers, the names its button posts back)."""
    assert 'name="confirmed" value="yes"' in page, "a course-wide run must ask first: " + page[-1500:]
    covered = set(_all(r'<li[^>]* data-name="([^"]+)"', page))
    posted = set(_all(r'<input type="hidden" name="names" value="([^"]+)">', page))
    return covered, posted


async def snapshot(kube: KubeClient, namespace: str) -> dict[str, Any]:
    items = (await kube.list(USERLANDS, namespace))["items"]
    return {u["metadata"]["name"]: (u["spec"], u["metadata"].get("annotations") or {}) for u in items}


async def mixed_class(kube: KubeClient, namespace: str, web_ui: AppFactory) -> AsyncIterator[Browserless]:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode", reclaim="Retain", displayName="VS Code")
    await make_template(kube, namespace, "demo", reclaim=None, displayName="Demo")
    for login, template, suspended, phase, reason in CLASS:
        name = naming.userland_name(template, login)
        body = userland_body(login, template, name=name)
        body["spec"]["suspended"] = suspended
        if name == REMOVING:
            body["metadata"]["finalizers"] = [KEEP]
        await kube.create(USERLANDS, namespace, body)
        if phase is not None:
            await set_phase(kube, namespace, name, phase, reason=reason,
                            url=f"http://{login}.{template}.example.edu/")
    await kube.delete(USERLANDS, namespace, REMOVING)
    teacher = (await web_ui())(INSTRUCTOR)
    try:
        # The web UI's watches have seen everything once the removal shows.
        for _ in range(200):
            status, page = await teacher.get(f"/courses/{namespace}")
            if status == 200 and "Being removed" in page and len(shown_environments(page)) == len(CLASS):
                break
        yield teacher
    finally:
        await kube.merge_patch(USERLANDS, namespace, REMOVING, {"metadata": {"finalizers": None}})
