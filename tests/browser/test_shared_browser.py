"""One browser profile, two students after each other (a university lab): nothing alice's
environment left in the browser reaches bob, and a page beside alice's origin cannot act as her.

The attack (issue 7): alice's environment registers a service worker with scope `/` that
rewrites pages, stores a token in localStorage and the Cache API, sets a cookie, and serves a
`Cache-Control: public` page. On one shared origin that worker rewrote bob's pages and bob got
alice's cached page. Here alice has her own origin, and her sign-out walks through it with
Clear-Site-Data: after it, bob (same browser context) finds none of it, not on his origin and
not on hers, and alice's origin is a 403 for him with a link to his own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import TEMPLATE_HOST, Platform
from tests.browser.test_student_flow import expect_environment_of, sign_in

LEFTOVERS = """async () => ({
    registrations: (await navigator.serviceWorker.getRegistrations()).length,
    controlled: navigator.serviceWorker.controller !== null,
    secret: localStorage.getItem("secret"),
    caches: await caches.keys(),
    httpCached: await fetch("/cacheable", {cache: "only-if-cached", mode: "same-origin"})
        .then((r) => r.ok, () => false),
    cookie: document.cookie,
})"""
NOTHING = {"registrations": 0, "controlled": False, "secret": None, "caches": [], "httpCached": False,
           "cookie": ""}


async def leftovers(page: Page) -> dict[str, Any]:
    result: dict[str, Any] = await page.evaluate(LEFTOVERS)
    return result


async def test_a_shared_browser_keeps_nothing_of_a_signed_out_student(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    # bypass_csp: the checks below run as scripts on the gateway's own pages, whose policy
    # (rightly) allows no script and no fetch.
    context = await browser.new_context(bypass_csp=True)
    page = await context.new_page()
    alice_origin, bob_origin = platform.origin("alice"), platform.origin("bob")

    # Alice works; her environment plants everything a page can leave in a browser.
    await sign_in(page, platform, "alice", platform.template_url, alice_origin + "/")
    await page.goto(alice_origin + "/plant")
    await expect(page.locator("#state")).to_have_text("planted")
    await page.goto(alice_origin + "/")
    await expect(page.locator("#hijacked")).to_have_text("rewritten by alice's service worker")
    assert await leftovers(page) == {"registrations": 1, "controlled": True, "secret": "alice's token",
                                     "caches": ["ide"], "httpCached": True, "cookie": "app_secret=alice"}
    await page.screenshot(path=tmp_path / "1-alice-planted.png", full_page=True)

    # A page beside hers (a sibling origin, same site, so her cookie goes along) opens a
    # WebSocket to her environment: refused, while her own page's socket works.
    sibling = f"http://mallory.{TEMPLATE_HOST}:{platform.port}/"
    await context.route(sibling, lambda route: route.fulfill(
        status=200, content_type="text/html", body="<!doctype html><title>sibling</title><p>hi</p>"))
    opened = """(url) => new Promise((resolve) => {
        const socket = new WebSocket(url);
        socket.onopen = () => { socket.close(); resolve("open"); };
        socket.onerror = () => resolve("refused");
        setTimeout(() => resolve("timeout"), 10000);
    })"""
    socket_url = alice_origin.replace("http://", "ws://") + "/ws"
    assert await page.evaluate(opened, socket_url) == "open"
    await page.goto(sibling)
    assert await page.evaluate(opened, socket_url) == "refused"
    await context.unroute(sibling)

    # Alice signs out; the browser passes through her origin on the way home.
    await page.goto(platform.url + "/auth/logout")
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url(platform.url + "/")
    await expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    assert [c for c in await context.cookies() if c["domain"] == f"alice.{TEMPLATE_HOST}"] == []

    # Bob, same browser, signs in and works on his own origin: nothing of alice's anywhere.
    await sign_in(page, platform, "bob", platform.template_url, bob_origin + "/")
    await expect_environment_of(page, "bob")
    await expect(page.locator("#hijacked")).to_have_count(0)
    assert await leftovers(page) == NOTHING
    await page.screenshot(path=tmp_path / "2-bob-clean.png", full_page=True)

    # Alice's origin is not his: a 403 page with a link to his own.
    response = await page.goto(alice_origin + "/")
    assert response is not None and response.status == 403
    link = page.get_by_role("link", name="Open your own environment")
    await expect(link).to_have_attribute("href", bob_origin + "/")
    await page.screenshot(path=tmp_path / "3-bob-403.png", full_page=True)

    # And on her origin itself (the gateway's own page there) nothing survived: no worker
    # rewrites it, no storage, no cache, no cookie.
    await page.goto(alice_origin + "/__userland/signed-out")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Signed out")
    await expect(page.locator("#hijacked")).to_have_count(0)
    assert await leftovers(page) == NOTHING
    await context.close()
