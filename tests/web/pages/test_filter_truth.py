"""What the dashboard shows is what a course-wide action acts on: every Status filter the page can
send, through every course-wide action (issue 16). Real parts: the web UI over HTTP as its own
ServiceAccount, the control plane, Redis (tests/web/pages/support.py); statuses are written as
the operator writes them.

A teacher who filters the dashboard ("Asleep") and presses "Suspend all" trusts that only the
environments on the screen are touched. Before this test, two of the six filter values the page
sent were unknown to the actions and meant "everyone".
"""

from __future__ import annotations

import pytest

from tests.web.pages.class_states import (
    ACTIONS,
    REMOVING,
    confirmation,
    course_wide_fields,
    filter_values,
    shown_environments,
    snapshot,
)
from tests.web.pages.support import Browserless
from userland.platform.clients.kube import KubeClient
from userland.platform.model import naming


async def test_every_filter_through_every_course_wide_action_picks_what_the_dashboard_shows(
        kube: KubeClient, namespace: str, mixed_class: Browserless) -> None:
    teacher = mixed_class
    status, page = await teacher.get(f"/courses/{namespace}")
    assert status == 200
    values = filter_values(page)
    assert len(values) >= 7 and "" in values  # "Any status" and one per status the rows can say
    before = await snapshot(kube, namespace)
    for value in values:
        for q in ("", "vscode", "alice"):
            status, page = await teacher.get(f"/courses/{namespace}?q={q}&phase={value}")
            assert status == 200
            shown = shown_environments(page)
            fields = course_wide_fields(page)
            assert fields["phase"] == value and fields["q"] == q
            for action in ("start", "restart", "suspend", "resume", "remove"):
                status, confirm = await teacher.post(ACTIONS.format(namespace),
                                                     {**fields, "scope": "all", "action": action})
                assert status == 200, (value, q, action, confirm[-1500:])
                covered, posted = confirmation(confirm)
                assert covered == shown, (value, q, action)
                # The button acts on exactly those, minus one already on its way out.
                assert posted == shown - {REMOVING}, (value, q, action)
    assert await snapshot(kube, namespace) == before  # asking first changed nothing


@pytest.mark.parametrize("value", ["pending", "idle", "nonsense", "Ready", "ready "])
async def test_a_filter_value_the_actions_do_not_know_is_refused_not_everyone(
        kube: KubeClient, namespace: str, mixed_class: Browserless, value: str) -> None:
    before = await snapshot(kube, namespace)
    for action in ("start", "restart", "suspend", "resume", "remove"):
        status, page = await mixed_class.post(ACTIONS.format(namespace),
                                         {"scope": "all", "action": action, "phase": value, "q": ""})
        assert status == 400, (action, page[-800:])
        assert "Unknown status filter" in page
        # Even confirmed with names: the filter it claims to have run with must be one we know.
        status, page = await mixed_class.post(ACTIONS.format(namespace), {
            "scope": "all", "action": action, "phase": value, "confirmed": "yes",
            "names": [naming.userland_name("vscode", "alice")], "confirm_name": namespace})
        assert status == 400
    assert await snapshot(kube, namespace) == before


async def test_suspend_all_under_asleep_suspends_only_the_asleep(kube: KubeClient, namespace: str,
                                                                  mixed_class: Browserless) -> None:
    """The issue's reproduction: Status = Asleep, "Suspend all" suspended running environments."""
    status, page = await mixed_class.get(f"/courses/{namespace}?phase=asleep")
    assert shown_environments(page) == {naming.userland_name("demo", "alice")}
    fields = course_wide_fields(page)
    status, confirm = await mixed_class.post(ACTIONS.format(namespace), {**fields, "scope": "all",
                                                                    "action": "suspend"})
    _, posted = confirmation(confirm)
    status, done = await mixed_class.post(ACTIONS.format(namespace), {
        **fields, "scope": "all", "action": "suspend", "confirmed": "yes", "names": sorted(posted)})
    assert status == 200, done[-1500:]
    after = await snapshot(kube, namespace)
    suspended = {name for name, (spec, _) in after.items() if spec.get("suspended")}
    assert suspended == {naming.userland_name("demo", "alice"), naming.userland_name("vscode", "bob"),
                         naming.userland_name("gone", "frank")}
    # The audit log says which environment, and the filter the course-wide run ran with.
    _, audit = await mixed_class.get(f"/courses/{namespace}/audit")
    entry = audit[audit.index('data-action="suspend_all"'):]
    entry = entry[:entry.index("</tr>")]
    assert "Filter: status Asleep" in entry and "alice (Demo)" in entry and "bob" not in entry


async def test_under_ready_only_ready_environments_show(namespace: str, mixed_class: Browserless) -> None:
    """Filters pick environments, not students: bob's suspended VS Code and alice's asleep Demo
    are not Ready, so they are not listed under Ready (their Ready ones are)."""
    _, page = await mixed_class.get(f"/courses/{namespace}?phase=ready")
    assert shown_environments(page) == {naming.userland_name("vscode", "alice"),
                                        naming.userland_name("demo", "bob")}
    assert "2 of 2 matching environments" in page
