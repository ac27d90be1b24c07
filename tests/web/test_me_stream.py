"""A student's "My environments" page, live (GET /me/stream): her environments, help and
assignments move without a reload, and nothing of another student's reaches her stream.

Real: the web UI (`create_app`, all middlewares, its help monitor on the real Redis channel)
served by aiohttp's test server, its watches on the real kube-apiserver; grants written by the
real grant store, as the help routes write them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.web import test_course_pages as course_pages
from tests.web.support import set_phase
from tests.web.test_course_pages import Client, headers
from userland.platform.clients.kube import ASSIGNMENTS, KubeClient
from userland.platform.model import naming
from userland.web.context import WEB
from userland.web.help_card import HELP, HelpServices

# The course pages' fixtures: two courses (alice in both, bob in cs101) and the web UI on them.
courses = course_pages.courses
client = course_pages.client


async def next_page(response: Any, timeout: float = 10.0) -> str:
    """The HTML of the stream's next `page` event."""
    event = ""
    async with asyncio.timeout(timeout):
        while True:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "page":
                return str(json.loads(line[6:])["html"])


def section(html: str, key: str) -> str:
    """The part of the page with this data-live key (one course's card)."""
    start = html.index(f'data-live="{key}"')
    end = html.find("data-live=", start + 10)
    return html[start:end if end >= 0 else len(html)]


async def page_with(response: Any, text: str, *, without: str = "") -> str:
    """Pages from the stream until one has `text` (and not `without`)."""
    async with asyncio.timeout(20):
        while True:
            html = await next_page(response)
            if text in html and (not without or without not in html):
                return html


async def test_the_page_opens_its_stream(client: Client) -> None:
    body = await (await client.get("/me", headers=headers("alice"))).text()
    assert 'id="me-live" data-stream="/me/stream"' in body and '<script src="/static/me.js"' in body
    assert (await client.get("/static/me.js")).status == 200


async def test_staff_joining_and_leaving_shows_on_her_open_page(client: Client,
                                                                courses: tuple[str, str]) -> None:
    cs = courses[0]
    services: HelpServices = client.app[WEB].extras[HELP]
    response = await client.get("/me/stream", headers=headers("alice"))
    assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    first = section(await next_page(response), f"course-{cs}")  # the page now: the form to ask
    assert "Ask for help" in first and "End ta1" not in first
    grant, _ = await services.grants.create(course=cs, student="alice", staff="ta1", role="assistant",
                                            basis="request", seconds=3600)
    helped = section(await page_with(response, "End ta1's access now"), f"course-{cs}")
    assert "ta1</strong> (assistant) can open your environments" in helped
    # While she is being helped the form to ask is replaced by who is helping.
    assert "Ask for help</button>" not in helped and "ta1 is helping you now" in helped
    assert f'value="{grant.id}"' in helped and 'name="csrf"' in helped
    await services.grants.end(grant.id, by="alice", reason="student")
    after = section(await page_with(response, "ta1, assistant"), f"course-{cs}")
    assert "Ask for help</button>" in after and "End ta1" not in after
    assert "ta1, assistant" in after and "ended by you" in after
    response.close()


async def test_her_environment_waking_shows_and_others_never_reach_her(
        client: Client, courses: tuple[str, str], kube: KubeClient) -> None:
    cs = courses[0]
    services: HelpServices = client.app[WEB].extras[HELP]
    bob = await client.get("/me/stream", headers=headers("bob"))
    assert "Ask for help" in await next_page(bob)
    await services.grants.create(course=cs, student="alice", staff="ta1", role="assistant", basis="request",
                                 seconds=3600)
    await set_phase(kube, cs, "ide-bob", "Ready", url="http://bob.ide.localhost:8000/")
    # bob's page follows his own environment, and never shows alice's helper.
    mine = await page_with(bob, 'href="http://bob.ide.localhost:8000/"')
    assert "ta1" not in mine and "alice" not in mine
    bob.close()


async def test_a_student_with_no_course_gets_a_stream_too(client: Client) -> None:
    response = await client.get("/me/stream", headers=headers("newbie"))
    assert response.status == 200
    assert "You have no environments yet" in await next_page(response)
    response.close()


async def test_her_assignment_handed_out_then_collected_shows_on_her_open_page(
        client: Client, courses: tuple[str, str], kube: KubeClient) -> None:
    cs = courses[0]
    response = await client.get("/me/stream", headers=headers("alice"))
    assert "My assignments" not in await next_page(response)
    await kube.create(ASSIGNMENTS, cs, {
        "apiVersion": naming.API_VERSION, "kind": "Assignment", "metadata": {"name": "week1"},
        "spec": {"title": "Week 1", "templates": ["ide"], "path": "week1", "due": "2030-12-07T23:59:00Z",
                 "source": {"url": "https://git.example.edu/c/w.git"}}})

    async def status(entry: dict[str, object]) -> None:
        await kube.merge_patch(ASSIGNMENTS, cs, "week1", {"status": {"students": [
            {"user": "alice", "template": "ide", "deadline": "2030-12-07T23:59:00Z", **entry},
            {"user": "bob", "template": "ide", "state": "HandedOut", "deadline": "2030-12-07T23:59:00Z"}]}},
            subresource="status")
    await status({"state": "HandedOut"})
    received = section(await page_with(response, "Week 1"), f"work-{cs}")
    assert "In your folder" in received and "<code>week1</code>" in received
    await status({"state": "HandedOut", "collected": {
        "round": "2030-12-07T23:59:00Z", "takenAt": "2030-12-07T23:59:30Z", "sha256": "3f2a9c01" + "0" * 56,
        "files": 2, "bytes": 15, "late": False}})
    collected = section(await page_with(response, "Your work was collected"), f"work-{cs}")
    assert "receipt" in collected and "3f2a9c01" in collected
    response.close()
