"""A student's day in a real browser: sign in with (fake) GitHub through the gateway, use the
environment on their own origin (page and WebSocket), stay signed in, never see another
student's environment, sign out. See conftest.py for what runs for real."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import TEMPLATE, TEMPLATE_HOST, Platform

SESSION_COOKIE = "userland_session"
ORIGIN_COOKIE = "userland_origin"


def at(url: str) -> re.Pattern[str]:
    """The exact URL, with or without a query."""
    return re.compile("^" + re.escape(url) + r"(\?.*)?$")


async def sign_in(page: Page, platform: Platform, login: str, start_url: str, lands: str) -> None:
    """Open `start_url` signed out, be sent to GitHub, authorize as `login`, arrive at `lands`."""
    await page.goto(start_url)
    await expect(page).to_have_url(at(platform.authorize_url))
    await expect(page.get_by_role("heading")).to_contain_text("Authorize fake-client-id")
    await page.get_by_role("button", name=f"Authorize as {login}").click()
    await page.wait_for_url(lands)


async def expect_environment_of(page: Page, login: str) -> None:
    """The demo environment's page, served to `login` by `login`'s own environment."""
    await expect(page).to_have_title(f"{login}'s {TEMPLATE} environment")
    heading = page.get_by_role("heading", level=1)
    await expect(heading).to_have_text(f"Hello {login}! This is your environment.")
    await expect(page.locator("#owner")).to_have_text(login)
    await expect(page.locator("#x-user")).to_have_text(login)
    await expect(page.locator("#signature")).to_have_text("present")
    await expect(page.locator(".warn")).to_have_count(0)  # the page's own "not the owner!" warning


async def websocket_echo(page: Page, text: str) -> str:
    """Open a WebSocket from the page to `ws` next to it, send `text`, return the first answer."""
    return str(await page.evaluate("""(text) => new Promise((resolve, reject) => {
        const url = new URL("ws", location.href);
        url.protocol = "ws:";
        const socket = new WebSocket(url.href);
        socket.onopen = () => socket.send(text);
        socket.onmessage = (event) => { resolve(event.data); socket.close(); };
        socket.onerror = () => reject(new Error("websocket failed: " + url.href));
        setTimeout(() => reject(new Error("no echo from " + url.href)), 10000);
    })""", text))


async def cookies_named(context: BrowserContext, name: str) -> list[dict[str, object]]:
    return [dict(c) for c in await context.cookies() if c["name"] == name]


async def test_students_sign_in_use_only_their_own_environment_and_sign_out(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    github = platform.github
    alice_ctx = await browser.new_context()
    # Bob's browser also claims to be alice in a header: the gateway must not believe it.
    bob_ctx = await browser.new_context(extra_http_headers={"X-User": "alice"})
    alice, bob = await alice_ctx.new_page(), await bob_ctx.new_page()
    alice_origin, bob_origin = platform.origin("alice"), platform.origin("bob")

    # Alice opens the class's address, signs in at GitHub and lands on her own origin.
    await sign_in(alice, platform, "alice", platform.template_url, alice_origin + "/")
    await expect_environment_of(alice, "alice")
    await expect(alice.locator("#path")).to_have_text("/")
    # Two host-only cookies: the platform's and her origin's; neither is sent anywhere else.
    [platform_cookie] = await cookies_named(alice_ctx, SESSION_COOKIE)
    [origin_cookie] = await cookies_named(alice_ctx, ORIGIN_COOKIE)
    assert (platform_cookie["domain"], platform_cookie["path"], platform_cookie["httpOnly"],
            platform_cookie["sameSite"]) == ("userland.localhost", "/", True, "Lax")
    assert (origin_cookie["domain"], origin_cookie["path"], origin_cookie["httpOnly"]) == \
        (f"alice.{TEMPLATE_HOST}", "/", True)

    # The page's own WebSocket echo, used the way a student would: type, click Send.
    log = alice.locator("#log")
    await expect(log).to_contain_text("connected to /ws")
    await alice.locator("#message").fill("print('hello')")
    await alice.get_by_role("button", name="Send").click()
    await expect(log).to_contain_text("sent: print('hello')\necho: print('hello')")
    await alice.screenshot(path=tmp_path / "1-alice-environment.png", full_page=True)

    # A reload keeps the session: no trip to GitHub.
    consent_pages = github.consent_pages
    await alice.reload()
    await expect_environment_of(alice, "alice")
    assert github.consent_pages == consent_pages

    # Bob signs in in his own browser and gets his own origin, WebSocket included.
    await sign_in(bob, platform, "bob", platform.template_url, bob_origin + "/")
    await expect_environment_of(bob, "bob")
    assert await websocket_echo(bob, "bob's ping") == "bob's ping"
    await bob.screenshot(path=tmp_path / "2-bob-environment.png", full_page=True)
    # Alice's origin is not served to him: a 403 page with a link to his own.
    for path in ("/", "/?user=alice", "/ide-alice/"):
        response = await bob.goto(alice_origin + path)
        assert response is not None and response.status == 403
        await expect(bob.get_by_role("heading", level=1)).to_have_text("This is alice's environment")
    await bob.screenshot(path=tmp_path / "3-bob-at-alices-origin.png", full_page=True)
    await bob.get_by_role("link", name="Open your own environment").click()
    await bob.wait_for_url(bob_origin + "/")
    await expect_environment_of(bob, "bob")
    assert github.consent_pages == consent_pages + 1  # bob's one sign-in

    # Alice signs out through the sign-out page's form: through her origin, back home.
    await alice.goto(platform.url + "/auth/logout")
    await expect(alice.get_by_role("heading", level=1)).to_have_text("Sign out")
    await expect(alice.locator("body")).to_contain_text("You are signed in as alice.")
    await alice.screenshot(path=tmp_path / "4-sign-out.png", full_page=True)
    await alice.get_by_role("button", name="Sign out").click()
    await alice.wait_for_url(platform.url + "/")
    await expect(alice.get_by_role("link", name="Sign in")).to_be_visible()  # the web UI, signed out
    await expect(alice.locator("body")).not_to_contain_text("Signed in as")
    await alice.screenshot(path=tmp_path / "5-signed-out.png", full_page=True)
    assert await cookies_named(alice_ctx, SESSION_COOKIE) == []
    assert await cookies_named(alice_ctx, ORIGIN_COOKIE) == []

    # Her next visit asks her to sign in again ...
    await alice.goto(alice_origin + "/")
    await expect(alice).to_have_url(at(platform.authorize_url))
    await expect(alice.get_by_role("button", name="Authorize as alice")).to_be_visible()
    # ... and so do the old cookies, replayed in another browser: the sessions are gone server-side.
    replay_ctx = await browser.new_context()
    await replay_ctx.add_cookies([
        {"name": SESSION_COOKIE, "value": str(platform_cookie["value"]), "url": platform.url},
        {"name": ORIGIN_COOKIE, "value": str(origin_cookie["value"]), "url": alice_origin}])
    replay = await replay_ctx.new_page()
    await replay.goto(alice_origin + "/")
    await expect(replay).to_have_url(at(platform.authorize_url))
    # Bob is still signed in.
    await bob.goto(bob_origin + "/")
    await expect_environment_of(bob, "bob")

    for context in (alice_ctx, bob_ctx, replay_ctx):
        await context.close()


async def test_denied_consent_shows_a_friendly_400_page(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    # The Template's host (ide.localhost:<port>, matched without its port) sends the student
    # on to sign in.
    await page.goto(platform.template_url)
    await expect(page).to_have_url(at(platform.authorize_url))
    await page.screenshot(path=tmp_path / "6-github-consent.png", full_page=True)

    async with page.expect_response(lambda r: "/auth/callback?" in r.url) as callback:
        await page.get_by_role("button", name="Cancel").click()
    response = await callback.value
    assert response.status == 400
    assert response.url.startswith(platform.url + "/auth/callback?error=access_denied")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Sign-in cancelled")
    await expect(page.locator("body")).to_contain_text(
        "You did not allow this site to use your GitHub account.")
    content = await page.content()
    for leak in ("Traceback", 'File "', "Exception", "access_denied"):
        assert leak not in content
    await page.screenshot(path=tmp_path / "7-consent-denied.png", full_page=True)
    assert await cookies_named(context, SESSION_COOKIE) == []

    # Its "Sign in again" link starts over at GitHub.
    await page.get_by_role("link", name="Sign in again").click()
    await expect(page).to_have_url(at(platform.authorize_url))
    await context.close()
