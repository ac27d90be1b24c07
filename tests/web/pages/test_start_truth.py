"""Start tells the truth and never resumes what staff suspended unless an instructor chooses it;
an assistant cannot act on the whole class by naming every environment (issues 16 and 17).

Real parts: the web UI over HTTP as its own ServiceAccount, the control plane, Redis; the
course is class_states.CLASS (one environment in every state).
"""

from __future__ import annotations

import re

from tests.web.pages.class_states import ACTIONS, CLASS, REMOVING, confirmation, snapshot
from tests.web.pages.support import ASSISTANT, INSTRUCTOR, Browserless, outcomes
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming

STARTED_AT = "userland.dev/started-at"
STARTED_BY = "userland.dev/started-by"
LAST_ACTIVITY = "userland.dev/last-activity"


def n(template: str, login: str) -> str:
    return naming.userland_name(template, login)


def result_details(page: str) -> list[tuple[str, str, str, str]]:
    """(login, environment, outcome, details) per row of a results page."""
    rows = re.findall(r'<tr class="outcome-(\w+)"[^>]*>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*'
                      r'<td>.*?</td>\s*<td>([^<]*)</td>', page, re.S)
    return [(login.strip(), env.strip(), outcome, detail.strip()) for outcome, login, env, detail in rows]


async def test_an_assistant_cannot_restart_or_start_the_class_by_naming_every_environment(
        kube: KubeClient, namespace: str, mixed_class: Browserless) -> None:
    """The attack review: no scope=all, every environment listed by name: "9 restarted"."""
    ta = Browserless(client=mixed_class.client, login=ASSISTANT)
    everyone = [n(template, login) for login, template, *_ in CLASS if n(template, login) != REMOVING]
    before = await snapshot(kube, namespace)
    for action in ("restart", "start"):
        for names in (everyone, [n("vscode", "alice"), n("demo", "bob")]):  # the class; two students
            status, page = await ta.post(ACTIONS.format(namespace), {"action": action, "names": names})
            assert status == 403, (action, len(names), page[-800:])
            assert "one student at a time" in page
    assert await snapshot(kube, namespace) == before
    # One student's environments, both of them, is an assistant's job.
    status, page = await ta.post(ACTIONS.format(namespace), {
        "action": "restart", "names": [n("vscode", "alice"), n("demo", "alice")]})
    assert status == 200 and "Restart 2 environments?" in page, page[-800:]  # two: it asks first
    status, page = await ta.post(ACTIONS.format(namespace), {
        "action": "restart", "names": [n("vscode", "alice"), n("demo", "alice")], "confirmed": "yes"})
    assert status == 200, page[-800:]
    assert {o for _, _, o in outcomes(page)} == {"restarted"}


async def test_an_assistants_start_never_resumes_what_staff_suspended(
        kube: KubeClient, namespace: str, mixed_class: Browserless) -> None:
    ta = Browserless(client=mixed_class.client, login=ASSISTANT)
    status, page = await ta.post(ACTIONS.format(namespace), {"action": "start", "names": n("vscode", "bob")})
    assert status == 200, page[-800:]
    [(login, _, outcome, detail)] = result_details(page)
    assert (login, outcome) == ("bob", "left_suspended") and "instructor" in detail
    bob = await kube.get(USERLANDS, namespace, n("vscode", "bob"))
    assert bob["spec"]["suspended"] is True
    assert STARTED_AT not in (bob["metadata"].get("annotations") or {})
    # Even with the instructor's choice forged into the form.
    status, page = await ta.post(ACTIONS.format(namespace), {
        "action": "start", "names": n("vscode", "bob"), "confirmed": "yes", "resume_suspended": "yes"})
    assert status == 200 and (await kube.get(USERLANDS, namespace, n("vscode", "bob")))["spec"]["suspended"]


async def test_start_reports_what_is_true_for_each_environment(kube: KubeClient, namespace: str,
                                                               mixed_class: Browserless) -> None:
    teacher = mixed_class
    expected = {
        n("vscode", "alice"): ("unchanged", "already running"),
        n("demo", "alice"): ("started", "it was asleep"),
        n("vscode", "carol"): ("unchanged", "already starting"),
        n("vscode", "dave"): ("cannot_start", "the image cannot be downloaded"),
        n("gone", "grace"): ("cannot_start", "its template does not exist yet"),
        n("vscode", "erin"): ("unchanged", "waiting to be set up"),
    }
    for name, (outcome, words) in expected.items():
        status, page = await teacher.post(ACTIONS.format(namespace), {"action": "start", "names": name})
        assert status == 200, page[-800:]
        [(_, _, got, detail)] = result_details(page)
        assert (got, words in detail) == (outcome, True), (name, got, detail)
        assert "already running" not in detail or name == n("vscode", "alice")
    woken = (await kube.get(USERLANDS, namespace, n("demo", "alice")))["metadata"]["annotations"]
    # The operator names the real cause from these (its Event: started by the teacher).
    assert woken[STARTED_BY] == INSTRUCTOR
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", woken[STARTED_AT])
    assert LAST_ACTIVITY not in woken


async def test_start_with_suspended_ones_asks_and_resumes_only_when_the_teacher_chooses(
        kube: KubeClient, namespace: str, mixed_class: Browserless) -> None:
    teacher = mixed_class
    names = [n("vscode", "bob"), n("demo", "alice")]
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "start", "names": names})
    assert status == 200
    covered, posted = confirmation(page)
    assert covered == posted == set(names)
    box = page[page.index('name="resume_suspended"'):][:80]
    assert "checked" not in box  # resuming is never the default
    # Confirmed as it comes (the box not ticked): the suspended one stays suspended.
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "start", "names": names, "confirmed": "yes"})
    rows = {login: (outcome, detail) for login, _, outcome, detail in result_details(page)}
    assert rows["bob"][0] == "left_suspended" and rows["alice"][0] == "started"
    assert (await kube.get(USERLANDS, namespace, n("vscode", "bob")))["spec"]["suspended"] is True
    # Ticked: resumed, and said so.
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "start", "names": [n("vscode", "bob")], "confirmed": "yes", "resume_suspended": "yes"})
    [(login, _, outcome, detail)] = result_details(page)
    assert (login, outcome) == ("bob", "started") and "suspended" in detail
    bob = await kube.get(USERLANDS, namespace, n("vscode", "bob"))
    assert bob["spec"]["suspended"] is False and bob["metadata"]["annotations"][STARTED_BY] == INSTRUCTOR


async def test_start_all_before_a_lecture_leaves_suspended_ones_alone_by_default(
        kube: KubeClient, namespace: str, mixed_class: Browserless) -> None:
    """The issue: Status = Waiting, "Start all": it started 15 with no confirmation, including
    one an instructor had suspended on purpose."""
    teacher = mixed_class
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "start", "scope": "all",
                                                                  "q": "", "phase": ""})
    _, posted = confirmation(page)
    assert "2 suspended" in page  # bob's VS Code and frank's
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "start", "scope": "all", "q": "", "phase": "", "confirmed": "yes", "names": sorted(posted)})
    assert status == 200, page[-1500:]
    after = await snapshot(kube, namespace)
    assert after[n("vscode", "bob")][0]["suspended"] is True
    assert after[n("gone", "frank")][0]["suspended"] is True
