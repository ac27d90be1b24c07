"""The pages of an LTI launch: shown inside the LMS's iframe, so, unlike every other page the
gateway answers itself, they may be framed (by any site: which LMS frames them is not known in
advance), and they run one script, allowed by its hash (templates/lti.js): the LTI Platform
Storage messages (`lti.put_data`, `lti.get_data`) and the "open in a new window" step.
Everything a page needs is in `data-` attributes, so the script is the same bytes every time.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources

from aiohttp import web

from userland.auth import pages
from userland.platform.model import look

LTI_SCRIPT = importlib.resources.files("userland.auth").joinpath("templates/lti.js").read_text()


def script_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


LTI_CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src {look.style_hash(look.GATEWAY_STYLE)}; "
    f"script-src {script_hash(LTI_SCRIPT)}; img-src 'self'; base-uri 'none'; form-action 'self'"
)
# What the gateway sets on the /lti/ pages instead of its own (proxy/pages.py OWN_RESPONSE_HEADERS):
# no X-Frame-Options and no frame-ancestors (the LMS frames them), one script by hash, no Referer
# to other sites (tickets travel in URLs).
LTI_RESPONSE_HEADERS = {
    "Content-Security-Policy": LTI_CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
LTI_PATH_PREFIX = "/lti/"


def step_page(*, mode: str, title: str, working: str, url: str = "", key: str = "", value: str = "",
              storage_target: str = "", platform_origin: str = "", restart_url: str = "") -> web.Response:
    """A page that carries the launch one step on (templates/lti.js says what each mode does)."""
    return pages.render("lti.html", title=title, working=working, mode=mode, url=url, key=key, value=value,
                        storage_target=storage_target, platform_origin=platform_origin,
                        restart_url=restart_url, script=LTI_SCRIPT)


def refusal(status: int, title: str, message: str) -> web.Response:
    return pages.error_page(status, title, message)
