"""A student's day in a real browser: sign in with (fake) GitHub through the gateway, use the
environment (page and WebSocket), stay signed in, never see another student's environment,
sign out. See conftest.py for what runs for real."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import TEMPLATE, TEMPLATE_HOST, Platform

SESSION_COOKIE = "userland_session"


def at(url: str) -> re.Pattern[str]:
    """The exact URL, with or without a query."""
    return re.compile("^" + re.escape(url) + r"(\?.*)?$")


async def sign_in(page: Page, platform: Platform, login: str, start_url: str) -> None:
    """Open `start_url` signed out, be sent to GitHub, authorize as `login`, come back."""
    await page.goto(start_url)
    await expect(page).to_have_url(at(platform.authorize_url))
    await expect(page.get_by_role("heading")).to_contain_text("Authorize fake-client-id")
    await page.get_by_role("button", name=f"Authorize as {login}").click()
    await page.wait_for_url(start_url)


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


async def session_cookie(context: BrowserContext) -> dict[str, object]:
    cookies = [c for c in await context.cookies() if c["name"] == SESSION_COOKIE]
    assert len(cookies) == 1, cookies
    return dict(cookies[0])


async def test_students_sign_in_use_only_their_own_environment_and_sign_out(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    github = platform.github
    alice_ctx = await browser.new_context()
    # Bob's browser also claims to be alice in a header: the gateway must not believe it.
    bob_ctx = await browser.new_context(extra_http_headers={"X-User": "alice"})
    alice, bob = await alice_ctx.new_page(), await bob_ctx.new_page()

    # Alice opens her environment's URL, signs in at GitHub and lands on her environment.
    await sign_in(alice, platform, "alice", platform.env_url)
    await expect_environment_of(alice, "alice")
    await expect(alice.locator("#path")).to_have_text("/ide/")
    cookie = await session_cookie(alice_ctx)
    assert (cookie["domain"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == \
        ("userland.localhost", "/", True, "Lax")

    # The page's own WebSocket echo, used the way a student would: type, click Send.
    log = alice.locator("#log")
    await expect(log).to_contain_text("connected to /ide/ws")
    await alice.locator("#message").fill("print('hello')")
    await alice.get_by_role("button", name="Send").click()
    await expect(log).to_contain_text("sent: print('hello')\necho: print('hello')")
    await alice.screenshot(path=tmp_path / "1-alice-environment.png", full_page=True)

    # A reload keeps the session: no trip to GitHub.
    consent_pages = github.consent_pages
    await alice.reload()
    await expect_environment_of(alice, "alice")
    assert github.consent_pages == consent_pages

    # Bob signs in in his own browser and gets his own environment, WebSocket included.
    await sign_in(bob, platform, "bob", platform.env_url)
    await expect_environment_of(bob, "bob")
    assert await websocket_echo(bob, "bob's ping") == "bob's ping"
    await bob.screenshot(path=tmp_path / "2-bob-environment.png", full_page=True)
    # Whatever bob asks for on the Template's route, he reaches his own environment only.
    for path in ("/ide/alice", "/ide/?user=alice", "/ide/../ide/", "/ide/ide-alice/", "/ide"):
        await bob.goto(platform.url + path)
        await expect_environment_of(bob, "bob")
    assert github.consent_pages == consent_pages + 1  # bob's one sign-in

    # Alice signs out through the sign-out page's form.
    await alice.goto(platform.url + "/auth/logout")
    await expect(alice.get_by_role("heading", level=1)).to_have_text("Sign out")
    await expect(alice.locator("body")).to_contain_text("You are signed in as alice.")
    await alice.screenshot(path=tmp_path / "3-sign-out.png", full_page=True)
    await alice.get_by_role("button", name="Sign out").click()
    await alice.wait_for_url(platform.url + "/")
    await expect(alice.get_by_role("link", name="Sign in")).to_be_visible()  # the landing page, signed out
    await expect(alice.locator("body")).not_to_contain_text("Signed in as")
    await alice.screenshot(path=tmp_path / "4-signed-out.png", full_page=True)
    assert [c for c in await alice_ctx.cookies() if c["name"] == SESSION_COOKIE] == []

    # Her next visit asks her to sign in again ...
    await alice.goto(platform.env_url)
    await expect(alice).to_have_url(at(platform.authorize_url))
    await expect(alice.get_by_role("button", name="Authorize as alice")).to_be_visible()
    # ... and so does the old cookie, replayed in another browser: the session is gone server-side.
    replay_ctx = await browser.new_context()
    await replay_ctx.add_cookies([{"name": SESSION_COOKIE, "value": str(cookie["value"]),
                                   "url": platform.url}])
    replay = await replay_ctx.new_page()
    await replay.goto(platform.env_url)
    await expect(replay).to_have_url(at(platform.authorize_url))
    # Bob is still signed in.
    await bob.goto(platform.env_url)
    await expect_environment_of(bob, "bob")

    for context in (alice_ctx, bob_ctx, replay_ctx):
        await context.close()


async def test_denied_consent_shows_a_friendly_400_page(
        browser: Browser, platform: Platform, tmp_path: Path) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    # The host-routed Template: ide.localhost:<port> is matched without its port (an unrouted
    # host would get the gateway's 404), so the student is sent to sign in.
    await page.goto(f"http://{TEMPLATE_HOST}:{platform.port}/")
    await expect(page).to_have_url(at(platform.authorize_url))
    await page.screenshot(path=tmp_path / "5-github-consent.png", full_page=True)

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
    await page.screenshot(path=tmp_path / "6-consent-denied.png", full_page=True)
    assert [c for c in await context.cookies() if c["name"] == SESSION_COOKIE] == []

    # Its "Sign in again" link starts over at GitHub.
    await page.get_by_role("link", name="Sign in again").click()
    await expect(page).to_have_url(at(platform.authorize_url))
    await context.close()
