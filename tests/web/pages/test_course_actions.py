"""Acting on a course's environments: remove (with confirmation), restart, suspend, whole-course runs.

Real parts: the web UI app over HTTP, the control plane, Redis (tests/web/pages/support.py).
"""

from __future__ import annotations

import asyncio
import re
import uuid

from tests.operator.support import userland_body
from tests.support import eventually
from tests.web.pages.support import (
    ASSISTANT,
    INSTRUCTOR,
    AppFactory,
    make_course,
    make_template,
    outcome_set,
    outcomes,
)
from userland.platform.clients.kube import EVENTS, NAMESPACES, USERLANDS, KubeClient, NotFound
from userland.platform.model import naming

ACTIONS = "/courses/{}/actions"


async def _students(kube: KubeClient, namespace: str, template: str, *logins: str) -> list[str]:
    names = []
    for login in logins:
        name = naming.userland_name(template, login)
        await kube.create(USERLANDS, namespace, userland_body(login, template, name=name))
        names.append(name)
    return names


async def _alive(kube: KubeClient, namespace: str) -> set[str]:
    items = (await kube.list(USERLANDS, namespace))["items"]
    return {u["metadata"]["name"] for u in items if not u["metadata"].get("deletionTimestamp")}


async def test_remove_confirms_with_what_happens_to_files_then_removes(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode", reclaim="Retain", displayName="VS Code")
    await make_template(kube, namespace, "scratch", reclaim="Delete", displayName="Scratch space")
    keep = await _students(kube, namespace, "vscode", "alice", "carol")
    gone = await _students(kube, namespace, "scratch", "alice")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    form = {"action": "remove", "names": [keep[0], gone[0]]}
    status, page = await teacher.post(ACTIONS.format(namespace), form)
    assert status == 200
    assert "Remove 2 environments?" in page
    assert "Their files are kept and come back if you add them again." in page
    assert "Their files are deleted for good." in page
    assert 'name="confirmed" value="yes"' in page
    assert await _alive(kube, namespace) == set(keep + gone)  # nothing removed yet

    status, page = await teacher.post(ACTIONS.format(namespace), {**form, "confirmed": "yes"})
    assert status == 200, page
    assert outcome_set(page) == {"removed"}
    assert await _alive(kube, namespace) == {keep[1]}


async def test_remove_all_needs_the_course_name_typed(kube: KubeClient, namespace: str,
                                                      web_ui: AppFactory) -> None:
    await make_course(kube, namespace, title="Databases 101")
    await make_template(kube, namespace, "vscode")
    names = await _students(kube, namespace, "vscode", "alice", "bob", "carol")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "remove", "scope": "all"})
    assert status == 200 and 'name="confirm_name"' in page and "Remove 3 environments" in page
    confirmed = {"action": "remove", "scope": "all", "confirmed": "yes", "names": names}
    for typed in ("", "databases", "yes"):
        status, page = await teacher.post(ACTIONS.format(namespace), {**confirmed, "confirm_name": typed})
        assert status == 400 and "Type the course name" in page
    assert await _alive(kube, namespace) == set(names)
    status, page = await teacher.post(ACTIONS.format(namespace),
                                      {**confirmed, "confirm_name": "Databases 101"})
    assert status == 200 and outcome_set(page) == {"removed"}
    assert await _alive(kube, namespace) == set()


async def test_assistant_may_restart_but_not_remove(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    [name] = await _students(kube, namespace, "vscode", "alice")
    as_user = await web_ui()
    ta = as_user(ASSISTANT)
    for action in ("remove", "suspend"):
        status, page = await ta.post(ACTIONS.format(namespace), {"action": action, "names": name,
                                                                 "confirmed": "yes"})
        assert status == 403 and "Not allowed" in page
    for action in ("start", "restart"):
        status, _ = await ta.post(ACTIONS.format(namespace), {"action": action, "scope": "all"})
        assert status == 403  # course-wide runs are the instructor's
    status, page = await ta.post(ACTIONS.format(namespace), {"action": "restart", "names": name})
    assert status == 200, page
    assert outcomes(page) == [("alice", "Vscode", "restarted")]  # the display name, as on the dashboard
    obj = await kube.get(USERLANDS, namespace, name)
    assert "userland.dev/restartedAt" in (obj["metadata"].get("annotations") or {})
    assert await _alive(kube, namespace) == {name}


async def test_students_and_strangers_get_nothing(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    [name] = await _students(kube, namespace, "vscode", "alice")
    as_user = await web_ui()
    for action in ("remove", "restart", "suspend"):
        status, page = await as_user("alice").post(ACTIONS.format(namespace), {
            "action": action, "names": name, "confirmed": "yes"})
        assert status == 404 and "No such course" in page
    status, _ = await as_user(INSTRUCTOR).post(ACTIONS.format("kube-system"), {"action": "restart",
                                                                               "names": "x"})
    assert status == 404  # not a course, whether it exists or not
    assert await _alive(kube, namespace) == {name}


async def test_names_from_another_course_are_missing_and_never_touched(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    other = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": other}})
    try:
        await make_course(kube, other)
        await make_template(kube, other, "vscode")
        [theirs] = await _students(kube, other, "vscode", "bob")
        [ours] = await _students(kube, namespace, "vscode", "alice")
        as_user = await web_ui()
        status, page = await as_user(INSTRUCTOR).post(ACTIONS.format(namespace), {
            "action": "remove", "confirmed": "yes", "names": [ours, theirs, "../../etc", "x" * 300]})
        assert status == 200, page
        rows = outcomes(page)
        assert ("alice", "Vscode", "removed") in rows and (theirs, "—", "missing") in rows
        assert "../../etc" in page and "x" * 300 not in page
        assert await _alive(kube, other) == {theirs}
    finally:
        await kube.delete(NAMESPACES, None, other)


async def test_suspend_one_runs_at_once_suspend_many_asks_first(kube: KubeClient, namespace: str,
                                                                web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    names = await _students(kube, namespace, "vscode", "alice", "bob")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "suspend", "names": names[0]})
    assert status == 200 and outcome_set(page) == {"suspended"}
    assert (await kube.get(USERLANDS, namespace, names[0]))["spec"]["suspended"] is True
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "suspend", "scope": "all"})
    assert status == 200 and "Suspend 2 environments" in page and "files are kept" in page
    assert (await kube.get(USERLANDS, namespace, names[1]))["spec"].get("suspended") is not True
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "resume", "scope": "all"})
    assert status == 200 and "Resume 2 environments" in page  # course-wide: it lists them first
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "resume", "scope": "all",
                                                                  "confirmed": "yes", "names": names})
    assert status == 200 and outcome_set(page) == {"resumed", "unchanged"}
    assert (await kube.get(USERLANDS, namespace, names[0]))["spec"]["suspended"] is False


async def test_a_course_wide_run_of_over_a_thousand_environments_is_confirmed_and_runs(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    """500 students with two environments each (the issue's scale): the confirmation page posts
    every listed environment back, over 1,000 form fields. aiohttp's default limit (1,000
    fields) answered that with 413 "upload too large", so no whole-course suspend or removal
    of such a course could ever run."""
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    await make_template(kube, namespace, "db")
    logins = [f"s{i:03d}" for i in range(510)]
    semaphore = asyncio.Semaphore(32)

    async def add(login: str, template: str) -> None:
        async with semaphore:
            await kube.create(USERLANDS, namespace, userland_body(login, template,
                                                                  name=naming.userland_name(template, login)))
    await asyncio.gather(*(add(login, t) for login in logins for t in ("vscode", "db")))
    teacher = (await web_ui())(INSTRUCTOR)
    status, page = await teacher.post(ACTIONS.format(namespace), {"action": "suspend", "scope": "all"})
    assert status == 200 and "Suspend 1020 environments" in page, page[-2000:]
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page)
    confirmed = [(k, v) for k, v in fields if k != "csrf"]
    assert len(confirmed) > 1000
    status, page = await teacher.post(ACTIONS.format(namespace), confirmed)
    assert status == 200, page[-2000:]
    assert outcome_set(page) == {"suspended"} and len(outcomes(page)) == 1020
    assert (await kube.get(USERLANDS, namespace, naming.userland_name("db", "s509")))["spec"]["suspended"]


async def test_a_filtered_course_wide_start_touches_only_the_matches(kube: KubeClient, namespace: str,
                                                                     web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    names = await _students(kube, namespace, "vscode", "alice", "bob")
    for name in names:
        await kube.merge_patch(USERLANDS, namespace, name, {"spec": {"suspended": True}})
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    status, page = await teacher.post(ACTIONS.format(namespace),
                                      {"action": "start", "scope": "all", "q": "ali"})
    assert status == 200 and "Start 1 environment?" in page, page[-1500:]
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "start", "scope": "all", "q": "ali", "confirmed": "yes", "names": names[0],
        "resume_suspended": "yes"})  # staff suspended them: resuming is chosen on the confirmation
    assert status == 200, page
    assert outcomes(page) == [("alice", "Vscode", "started")]
    assert (await kube.get(USERLANDS, namespace, names[0]))["spec"]["suspended"] is False
    assert (await kube.get(USERLANDS, namespace, names[1]))["spec"]["suspended"] is True


async def test_actions_are_audited_on_the_audit_page_and_as_events(kube: KubeClient, namespace: str,
                                                                  web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    status, _ = await teacher.post(f"/courses/{namespace}/add", {"roster": "alice bob", "template": "vscode"})
    assert status == 200
    status, _ = await as_user(ASSISTANT).post(ACTIONS.format(namespace), {"action": "restart",
                                                                          "names": "vscode-bob"})
    assert status == 200
    status, page = await teacher.get(f"/courses/{namespace}/audit")
    assert status == 200
    table = page[page.index("<tbody>"):]
    assert table.index("Restarted") < table.index("Added students")  # newest first
    # Which environment each entry touched, not only whose.
    assert "ta1" in page and "teacher" in page and "alice (Vscode), bob (Vscode)" in page
    assert "bob (Vscode)</td>" in table[:table.index("Added students")]
    status, page = await teacher.get(f"/courses/{namespace}/audit?actor=ta1")
    table = page[page.index("<tbody>"):]
    assert "Restarted" in table and "Added students" not in table
    status, page = await teacher.get(f"/courses/{namespace}/audit?action=add")
    table = page[page.index("<tbody>"):]
    assert "Added students" in table and "Restarted" not in table
    status, page = await teacher.get(f"/courses/{namespace}/audit?actor=<script>&action=drop")
    assert status == 200 and "<script>" not in page and "not a GitHub login" in page
    assert (await as_user("alice").get(f"/courses/{namespace}/audit"))[0] == 404

    # The restart is an Event on bob's Userland; an add is recorded on the new Userland itself.
    events = (await kube.list(EVENTS, namespace))["items"]
    about_bob = [e for e in events if e["involvedObject"].get("name") == "vscode-bob"]
    assert [e["reason"] for e in about_bob] == ["Restarted"]
    assert "ta1" in about_bob[0]["message"]
    bob = await kube.get(USERLANDS, namespace, "vscode-bob")
    assert bob["metadata"]["annotations"]["userland.dev/added-by"] == INSTRUCTOR


async def test_unknown_action_and_empty_selection_are_clear_pages(kube: KubeClient, namespace: str,
                                                                  web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    as_user = await web_ui()
    status, page = await as_user(INSTRUCTOR).post(ACTIONS.format(namespace),
                                                  {"action": "explode", "names": "x"})
    assert status == 400 and "Unknown action" in page
    status, page = await as_user(INSTRUCTOR).post(ACTIONS.format(namespace), {"action": "restart"})
    assert status == 400 and "Nothing chosen" in page
    try:
        await kube.get(USERLANDS, namespace, "x")
        raise AssertionError("nothing should exist")
    except NotFound:
        pass


def _restarted(obj: dict[str, object]) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}  # type: ignore[union-attr]
    return "userland.dev/restartedAt" in annotations


async def _restarted_names(kube: KubeClient, namespace: str) -> set[str]:
    return {u["metadata"]["name"] for u in (await kube.list(USERLANDS, namespace))["items"] if _restarted(u)}


async def test_restarting_selected_environments_asks_first_naming_who(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    """Restarting loses what students have not saved: from "Apply to selected", several ask
    first, naming each student (as suspending several does); the row's own button does not."""
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode", displayName="VS Code")
    names = await _students(kube, namespace, "vscode", "alice", "bob", "carol")
    teacher = (await web_ui())(INSTRUCTOR)
    form = {"action": "restart", "names": names[:2]}
    status, page = await teacher.post(ACTIONS.format(namespace), form)
    assert status == 200 and "Restart 2 environments of 2 students?" in page, page[-1500:]
    assert "loses what is not saved" in page
    assert re.findall(r'<li data-name="([^"]+)">(\w+)', page) == [(names[0], "alice"), (names[1], "bob")]
    assert await _restarted_names(kube, namespace) == set()  # asking changed nothing
    status, page = await teacher.post(ACTIONS.format(namespace), {**form, "confirmed": "yes"})
    assert status == 200 and outcome_set(page) == {"restarted"}
    assert await _restarted_names(kube, namespace) == set(names[:2])


async def test_restart_these_restarts_what_the_search_lists(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    names = await _students(kube, namespace, "vscode", "alice", "albert", "bob")
    teacher = (await web_ui())(INSTRUCTOR)

    async def listed() -> bool:
        return "bob" in (await teacher.get(f"/courses/{namespace}"))[1]
    await eventually(listed)
    status, page = await teacher.get(f"/courses/{namespace}?q=al")
    assert status == 200 and ">Restart these…</button>" in page
    status, page = await teacher.post(ACTIONS.format(namespace),
                                      {"action": "restart", "scope": "all", "q": "al"})
    assert status == 200 and "Restart 2 environments of 2 students?" in page, page[-1500:]
    posted = re.findall(r'<input type="hidden" name="names" value="([^"]+)">', page)
    assert sorted(posted) == sorted(names[:2])
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "restart", "scope": "all", "q": "al", "confirmed": "yes", "names": posted})
    assert status == 200 and outcome_set(page) == {"restarted"}
    assert await _restarted_names(kube, namespace) == set(names[:2])


async def test_select_all_covers_every_page_of_the_search(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    """51 environments are two pages: ticking "select all" on the first means all 51 (the form's
    "every page" box, which the page's script ticks with it), and asks first, naming all 51."""
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    logins = [f"s{i:02d}" for i in range(51)]
    await asyncio.gather(*(_students(kube, namespace, "vscode", login) for login in logins))
    teacher = (await web_ui())(INSTRUCTOR)

    async def two_pages() -> bool:
        return "Page 1 of 2" in (await teacher.get(f"/courses/{namespace}"))[1]
    await eventually(two_pages)
    status, page = await teacher.get(f"/courses/{namespace}")
    bulk = page[page.index('<form id="bulk"'):]
    bulk = bulk[:bulk.index("</form>")]
    assert 'name="scope" value="all" id="every-page"' in bulk and "All 51 environments, on every page" in bulk
    visible = re.findall(r'name="names" value="([^"]+)" form="bulk"', page)
    assert len(visible) == 50
    status, page = await teacher.post(ACTIONS.format(namespace), {
        "action": "suspend", "names": visible, "scope": "all", "q": "", "phase": ""})
    assert status == 200 and "Suspend 51 environments of 51 students?" in page, page[-1500:]
    assert len(re.findall(r'<input type="hidden" name="names" value="([^"]+)">', page)) == 51
