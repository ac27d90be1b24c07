"""The web UI's static files: served (also from an editable install, whose files are links into
the source tree: without them every page lost its stylesheet), nothing else on disk reachable."""

from __future__ import annotations

from tests.web.pages.support import AppFactory


async def test_stylesheets_and_scripts_are_served_and_nothing_else(web_ui: AppFactory) -> None:
    as_user = await web_ui()
    client = as_user("anyone").client
    for name, kind in (("app.css", "text/css"), ("pages.css", "text/css"),
                       ("dashboard.js", ("text/javascript", "application/javascript"))):
        response = await client.get(f"/static/{name}")  # no identity needed
        assert response.status == 200, name
        assert response.headers["Content-Type"].startswith(kind), response.headers["Content-Type"]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert len(await response.read()) > 100
    for path in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py", "/static/nope.css",
                 "/static/", "/static/templates"):
        response = await client.get(path)
        assert response.status in (401, 403, 404), path  # the client resolves `..`: /app.py is a page
        assert "import" not in await response.text()
