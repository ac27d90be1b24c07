"""Admin pages: every course with staff and counts, Templates read-only, binding look-up.

Real parts: the web UI app over HTTP, the control plane, Redis (tests/web/pages/support.py).
"""

from __future__ import annotations

import uuid

from tests.operator.support import userland_body
from tests.web.pages.support import (
    ASSISTANT,
    INSTRUCTOR,
    PUBLIC,
    AppFactory,
    headers,
    make_course,
    make_template,
)
from userland.platform.clients.kube import NAMESPACES, TEMPLATES, USERLANDS, KubeClient


async def test_only_admins_see_the_admin_pages(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    as_user = await web_ui()
    for login, role in ((INSTRUCTOR, "student"), ("prof", "instructor"), (ASSISTANT, "student"),
                        ("alice", "student")):
        for path in ("/admin", "/admin/templates", "/admin/bindings?login=alice"):
            status, page = await as_user(login, role).get(path)
            assert status == 403 and "Admins only" in page, (login, path)


async def test_admin_sees_every_course_with_staff_and_counts(kube: KubeClient, namespace: str,
                                                             web_ui: AppFactory) -> None:
    await make_course(kube, namespace, title="Databases 101")
    await make_template(kube, namespace, "vscode")
    for user in ("alice", "bob"):
        await kube.create(USERLANDS, namespace, userland_body(user, "vscode"))
    await kube.create(USERLANDS, namespace, userland_body("alice", "mariadb"))
    await kube.merge_patch(USERLANDS, namespace, "vscode-alice", {"status": {"phase": "Ready"}},
                           subresource="status")
    as_user = await web_ui()
    status, page = await as_user("root", "admin").get("/admin")
    assert status == 200
    row = page[page.index(f'data-course="{namespace}"'):]
    row = row[:row.index("</tr>")]
    assert "Databases 101" in row and INSTRUCTOR in row and ASSISTANT in row
    assert "<td>2</td><td>3</td><td>1</td>" in row.replace("\n", "").replace("    ", "")
    assert 'action="/admin/bindings"' in page  # the bindings look-up
    staff = page[page.index("<strong>Admins</strong>"):]
    assert "root" in staff[:staff.index("</p>")] and "(you)" not in staff[:staff.index("</p>")]
    # An admin the web UI's own list does not name (by a team; make run once gave the web UI no
    # list at all): never "Admins: none" to them.
    status, page = await as_user("ops", "admin").get("/admin")
    staff = page[page.index("<strong>Admins</strong>"):]
    assert status == 200 and "ops (you)" in staff[:staff.index("</p>")]
    assert "none" not in staff[:staff.index("</p>")]


async def test_templates_page_shows_the_api_servers_message_for_an_invalid_one(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode", image="codercom/code-server:4.9", displayName="VS Code",
                        description="Browser IDE")
    await make_template(kube, namespace, "broken", image="demo:2")
    await kube.merge_patch(TEMPLATES, namespace, "broken", {"status": {"userlands": 0, "conditions": [{
        "type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "spec.port <must> be a port",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    await kube.merge_patch(TEMPLATES, namespace, "vscode", {"status": {"userlands": 7, "conditions": [{
        "type": "Ready", "status": "True", "reason": "Valid", "message": "ok",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    as_user = await web_ui()
    status, page = await as_user("root", "admin").get("/admin/templates")
    assert status == 200
    page = page[page.index(f'data-course="{namespace}"'):]  # earlier tests' courses may still be there
    page = page[:page.index("</section>")]
    vscode = page[page.index('data-template="vscode"'):]
    vscode = vscode[:vscode.index("</tr>")]
    assert "VS Code" in vscode and "Browser IDE" in vscode and "codercom/code-server:4.9" in vscode
    assert "host vscode.example.edu" in vscode and "<td>7</td>" in vscode and "Valid" in vscode
    broken = page[page.index('data-template="broken"'):]
    broken = broken[:broken.index("</tr>")]
    assert "Invalid" in broken and "InvalidSpec: spec.port &lt;must&gt; be a port" in broken


async def test_a_course_the_web_ui_cannot_read_is_shown_as_not_set_up(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    """The web UI's ServiceAccount lists namespaces everywhere, a course's contents only with its binding."""
    await make_course(kube, namespace, bind=False)
    as_user = await web_ui()
    status, page = await as_user("root", "admin").get("/admin")
    assert status == 200
    row = page[page.index(f'data-course="{namespace}"'):]
    assert "not set up (no RoleBinding)" in row[:row.index("</tr>")]
    status, page = await as_user("root", "admin").get(f"/courses/{namespace}/add")
    assert status == 403 and "Kubernetes refused this" in page  # readable words, not a traceback


async def test_binding_lookup_goes_to_the_gateway_for_a_valid_login_only(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    as_user = await web_ui()
    admin = as_user("root", "admin")
    status, _ = await admin.get("/admin/bindings?login=@Alice")
    assert status == 302
    response = await admin.client.get("/admin/bindings?login=Alice", allow_redirects=False,
                                      headers=headers("root", "admin"))
    assert response.headers["Location"] == f"{PUBLIC}/auth/admin/bindings/alice"
    for bad in ("", "a/b", "https://evil.test", "-x-"):
        status, page = await admin.get(f"/admin/bindings?login={bad}")
        assert status == 400 and "Not a GitHub login" in page


async def test_admin_page_lists_a_second_course(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    other = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACES, None, {"metadata": {"name": other}})
    try:
        await make_course(kube, namespace)
        await make_course(kube, other, title="Second course")
        as_user = await web_ui()
        status, page = await as_user("root", "admin").get("/admin")
        assert status == 200 and f'data-course="{namespace}"' in page and "Second course" in page
    finally:
        await kube.delete(NAMESPACES, None, other)
