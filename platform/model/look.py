"""The one look of every page Userland makes: the web UI's and the gateway's own (sign-in, waking,
not your environment, signed out, errors).

The web UI serves `CSS` as /static/look.css and builds on it (web/static/app.css); the gateway
and its sign-in pages inline `GATEWAY_STYLE` (they are served on students' own origins too,
where the platform's stylesheet is another origin, and their Content-Security-Policy allows
exactly this block by its hash, no script at all). Both import it from here because the
gateway and the web UI may not import each other. No external fonts or CDN: classrooms sit
behind firewalls.
"""

from __future__ import annotations

import base64
import hashlib

CSS = """\
:root {
  --bg: #f6f7f9; --card: #fff; --text: #1d2330; --muted: #5b6472; --line: #dde1e7;
  --accent: #2456c8; --accent-text: #fff; --ok: #16794a; --warn: #9a5b00; --bad: #b42318;
  --idle: #5b6472; --radius: 10px; --topbar: #17213a;
}
* { box-sizing: border-box; }
html { font-size: 16px; }
body { margin: 0; background: var(--bg); color: var(--text); line-height: 1.45;
       font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif; }
a { color: var(--accent); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, textarea:focus-visible {
  outline: 3px solid #8fb0ff; outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 1rem; top: .5rem; background: #fff; padding: .4rem .6rem; z-index: 10; }
.topbar { display: flex; flex-wrap: wrap; align-items: center; gap: 1rem; padding: .7rem 1.2rem;
          background: var(--topbar); color: #fff; }
.topbar a { color: #fff; text-decoration: none; }
.topbar nav { display: flex; gap: 1rem; flex: 1; }
.topbar nav a { opacity: .85; } .topbar nav a:hover { opacity: 1; text-decoration: underline; }
.brand { font-weight: 700; letter-spacing: .02em; }
.who { font-size: .9rem; opacity: .9; margin-left: auto; } .who a { text-decoration: underline; }
main { max-width: 72rem; margin: 1.5rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin: .2rem 0 1rem; } h2 { font-size: 1.2rem; margin: 1.5rem 0 .6rem; }
.muted { color: var(--muted); font-size: .92rem; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: var(--radius);
        padding: 1.2rem 1.4rem; margin-bottom: 1rem; }
.narrow { max-width: 38rem; margin: 3rem auto; }
.button, button { display: inline-block; border: 1px solid var(--accent); background: var(--accent);
  color: var(--accent-text); border-radius: 8px; padding: .45rem .9rem; font: inherit; cursor: pointer;
  text-decoration: none; }
.button.secondary, button.secondary { background: #fff; color: var(--accent); }
.button.danger, button.danger { background: var(--bad); border-color: var(--bad); }
button.link { background: none; border: none; color: var(--accent); padding: 0; text-decoration: underline; }
label { display: block; font-weight: 600; margin: .6rem 0 .25rem; }
input[type=text], input[type=search], input[type=file], select, textarea {
  font: inherit; padding: .45rem .6rem; border: 1px solid #b9c0cb; border-radius: 8px; width: 100%;
  background: #fff; color: var(--text); }
.notice { border-left: 4px solid var(--accent); background: #eef3ff; padding: .6rem .9rem;
          border-radius: 6px; }
.notice.bad { border-color: var(--bad); background: #fdecea; }
.notice.ok { border-color: var(--ok); background: #e8f6ee; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
@media (max-width: 640px) {
  .topbar nav { order: 3; flex-basis: 100%; }
  .narrow { margin: 1.5rem auto; }
  .card { padding: 1rem; }
}
"""

# What only the gateway's pages add: the waking page's steps, and a page's actions in a row.
_GATEWAY_EXTRA = """\
.card > h1:first-child { margin-top: 0; }
.actions { display: flex; flex-wrap: wrap; gap: .6rem; align-items: center; margin-top: 1rem; }
.card form button { margin-top: .8rem; }
.card form input[type=text] + button { display: block; }
.spinner { display: inline-block; width: 1rem; height: 1rem; border: 3px solid #ccd3de;
           border-top-color: var(--accent); border-radius: 50%; animation: spin 1s linear infinite;
           vertical-align: middle; margin-right: .5rem; }
@keyframes spin { to { transform: rotate(360deg); } }
@media (prefers-reduced-motion: reduce) { .spinner { animation: none; } }
ol.steps { list-style: none; padding: 0; margin: 1rem 0; }
ol.steps li { padding: .35rem 0 .35rem 1.8rem; position: relative; color: var(--muted); }
ol.steps li.done { color: var(--text); }
ol.steps li.done::before { content: "\\2713"; position: absolute; left: .2rem; color: var(--ok);
                           font-weight: bold; }
ol.steps li.now { color: var(--text); font-weight: 600; }
ol.steps li.now .spinner { position: absolute; left: 0; top: .45rem; width: .8rem; height: .8rem; }
"""

GATEWAY_STYLE = CSS + _GATEWAY_EXTRA


def style_hash(style: str) -> str:
    """The Content-Security-Policy source that allows exactly this inline `<style>` block."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(style.encode()).digest()).decode() + "'"
