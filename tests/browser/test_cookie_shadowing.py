"""A cookie planted for the parent domain never shadows another student's (issue 17), in Chromium.

A page on alice's origin can set `userland_origin=<value>; Domain=ide.localhost` from script (no
proxy sees that). Alice leaves such a page open on a lab computer, planting the origin cookie of
a session she keeps in her own browser, and re-planting it so it is always the newest. Bob signs
in at that computer: his browser now sends two `userland_origin` cookies to his origin, his own
and alice's, and the gateway kept the last one: bob got "Not your environment ... signed in as
alice" with a link to alice's (or, had the names been the platform's, worked in alice's account).
Now the gateway refuses such a request with a page that says how to recover, and its link
clears the site's cookies.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from playwright.async_api import Browser, expect

from tests.browser.conftest import TEMPLATE_HOST, Platform
from tests.browser.test_student_flow import at, expect_environment_of, sign_in


async def test_a_cookie_planted_for_the_parent_domain_never_shadows_another_students(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    alice_origin, bob_origin = platform.origin("alice"), platform.origin("bob")

    # Alice's own browser: a session she keeps, and its origin cookie's value (she can read it
    # in her developer tools).
    own = await browser.new_context()
    page = await own.new_page()
    await sign_in(page, platform, "alice", platform.template_url, alice_origin + "/")
    (kept,) = [c["value"] for c in await own.cookies() if c["name"] == "userland_origin"]

    # The lab computer: alice signs in, opens her hostile page and walks away leaving it open.
    lab = await browser.new_context()
    hostile = await lab.new_page()
    await sign_in(hostile, platform, "alice", platform.template_url, alice_origin + "/")
    await hostile.goto(alice_origin + "/plant-parent-cookie?" + urlencode(
        {"name": "userland_origin", "value": kept, "domain": TEMPLATE_HOST}))
    await expect(hostile.locator("#state")).to_have_text("planting")
    planted = [c for c in await lab.cookies() if c["name"] == "userland_origin" and c["value"] == kept]
    assert planted and planted[0]["domain"].lstrip(".") == TEMPLATE_HOST, "Chromium did not take the cookie"

    # Bob signs in at the same computer and opens his environment.
    page = await lab.new_page()
    await page.goto(platform.url + "/auth/login")
    await expect(page).to_have_url(at(platform.authorize_url))
    await page.get_by_role("button", name="Authorize as bob").click()
    await page.wait_for_url(platform.url + "/**")
    await page.goto(platform.template_url)
    await page.wait_for_timeout(300)  # the planted cookie is re-planted: newer than bob's now
    response = await page.goto(bob_origin + "/")
    assert response is not None
    sent = await response.request.all_headers()
    assert sent["cookie"].count("userland_origin=") == 2, sent["cookie"]
    # Before: 403 "Not your environment ... signed in as alice", a link to alice's environment.
    assert response.status == 400, await page.content()
    await expect(page.get_by_role("heading", level=1)).to_have_text(
        "Your browser has two sign-in cookies for this site")
    assert "alice" not in await page.content()
    await page.screenshot(path=tmp_path / "cookie-twice.png", full_page=True)

    # Recovering: with the hostile page closed, the page's link clears the site's cookies and
    # bob gets to his environment (through the platform, where he is still signed in).
    await hostile.close()
    await page.get_by_role("link", name="Clear this site's cookies").click()
    await page.wait_for_url(bob_origin + "/")
    await expect_environment_of(page, "bob")
    assert [c for c in await lab.cookies() if c["value"] == kept] == []
    await lab.close()
    await own.close()
