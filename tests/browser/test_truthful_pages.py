"""What a teacher sees is true, in a real browser through the real gateway (issue 16): the Status
filter lists environments, not students; an asleep one has a Start button; select-all ticks every
environment listed; addresses are links; an unknown address is a page with the navigation; the
gateway's own pages wear the web UI's look.

Real: Chromium, the gateway and the web UI (its own ServiceAccount), the control plane, Redis and
the fake GitHub (tests/browser/test_web_pages.py's `classroom`); statuses as the operator writes
them.
"""

from __future__ import annotations

from playwright.async_api import Browser, Page, expect

from tests.browser.test_web_pages import TEACHER, Classroom, classroom, sign_in_to  # noqa: F401
from tests.operator.support import userland_body
from tests.web.support import set_phase
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming

TOPBAR = "getComputedStyle(document.querySelector('.topbar')).backgroundColor"
FONT = "getComputedStyle(document.body).fontFamily"


async def _class(kube: KubeClient, ns: str) -> None:
    """carol (already there): VS Code Ready, and a demo suspended by staff (its Template does not
    exist). dave: VS Code asleep."""
    await set_phase(kube, ns, "vscode-carol", "Ready", url="http://carol.vscode.example.edu/")
    body = userland_body("carol", "demo")
    body["spec"]["suspended"] = True
    await kube.create(USERLANDS, ns, body)
    await set_phase(kube, ns, "demo-carol", "Pending", reason="TemplateNotFound")
    await kube.create(USERLANDS, ns, userland_body("dave", "vscode"))
    await set_phase(kube, ns, "vscode-dave", "Idle", reason="Asleep", url="http://dave.vscode.example.edu/")


async def test_the_dashboard_lists_what_the_filter_says_and_acts_on_what_it_lists(
        browser: Browser, classroom: Classroom, kube: KubeClient) -> None:  # noqa: F811
    ns = classroom.namespace
    await _class(kube, ns)
    page = await (await browser.new_context()).new_page()
    await sign_in_to(page, classroom, TEACHER, f"/courses/{ns}")
    await expect(page.locator('tr[data-name="demo-carol"]')).to_be_visible()
    # Suspended on purpose while its Template does not exist: it says Suspended, not Waiting.
    await expect(page.locator('tr[data-name="demo-carol"] .badge')).to_have_text("Suspended")

    # Under Ready: carol's VS Code only, not her suspended demo (nor dave's asleep VS Code).
    await page.select_option("#phase", "ready")
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("tr[data-name]")).to_have_count(1)
    await expect(page.locator('tr[data-name="vscode-carol"]')).to_be_visible()
    await expect(page.locator("#showing")).to_have_text(
        "Showing 1 of 1 matching environment (1 of 1 student).")
    await expect(page.locator("#unit")).to_contain_text("Each line is one environment")
    await expect(page.locator("section.course-wide h2")).to_have_text(
        "The 1 environment listed for this search, on every page")

    # And under Suspended, her demo (its Template missing or not).
    await page.select_option("#phase", "suspended")
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("tr[data-name]")).to_have_count(1)
    await expect(page.locator('tr[data-name="demo-carol"]')).to_be_visible()

    # Select all ticks every environment listed; the address is a link to the student's own.
    await page.goto(f"{classroom.url}/courses/{ns}")
    await page.locator("#select-all").check()
    boxes = page.locator("input[type=checkbox][name=names]")
    await expect(boxes).to_have_count(3)
    assert all([await box.is_checked() for box in await boxes.all()])
    link = page.locator('tr[data-name="vscode-carol"] a.address')
    await expect(link).to_have_attribute("href", "http://carol.vscode.example.edu/")
    await page.locator('tr[data-name="vscode-carol"] input[type=checkbox]').uncheck()
    assert await page.evaluate("document.getElementById('select-all').indeterminate")

    # An asleep row has a Start button; it wakes it, naming who did.
    await page.locator('tr[data-name="vscode-dave"]').get_by_role("button", name="Start").click()
    await expect(page.locator("#summary")).to_contain_text("1 started")
    await expect(page.locator("table.results")).to_contain_text("it was asleep")
    annotations = (await kube.get(USERLANDS, ns, "vscode-dave"))["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_STARTED_BY] == TEACHER


async def test_an_unknown_address_is_a_page_with_the_navigation_in_the_shared_look(
        browser: Browser, classroom: Classroom) -> None:  # noqa: F811
    page: Page = await (await browser.new_context()).new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    await sign_in_to(page, classroom, TEACHER, f"/courses/{classroom.namespace}")
    web_look = (await page.evaluate(TOPBAR), await page.evaluate(FONT))
    response = await page.goto(f"{classroom.url}/no/such/page")
    assert response is not None and response.status == 404
    await expect(page.get_by_role("heading", level=1)).to_have_text("There is no page here")
    # The teacher is staff through the course only (no global role): "Courses" stays.
    main_nav = page.get_by_role("navigation", name="Main")
    await expect(main_nav.get_by_role("link", name="Courses")).to_be_visible()
    assert "404: Not Found" not in await page.content()

    # The gateway's own pages look like the web UI's: a student's address opened by the teacher
    # (from the dashboard's link) says whose it is; the sign-out page; then signed out.
    port = classroom.url.rsplit(":", 1)[1]
    response = await page.goto(f"http://carol.vscode.localhost:{port}/")
    assert response is not None and response.status == 403
    await expect(page.get_by_role("heading", level=1)).to_have_text("This is carol's environment")
    await expect(page.locator("main")).to_contain_text("Only carol can open it; you are signed in as teacher")
    assert (await page.evaluate(TOPBAR), await page.evaluate(FONT)) == web_look
    await page.goto(f"{classroom.url}/auth/logout")
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert (await page.evaluate(TOPBAR), await page.evaluate(FONT)) == web_look
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Welcome to Userland")
    assert not [e for e in errors if "Content Security Policy" in e], errors
