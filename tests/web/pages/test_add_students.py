"""Adding students through the web UI's form: one login, a pasted list, a CSV; per-row results.

Real parts: the web UI app over HTTP, the control plane, Redis (tests/web/pages/support.py).
"""

from __future__ import annotations

import aiohttp

from tests.web.pages.support import (
    ASSISTANT,
    INSTRUCTOR,
    PUBLIC,
    AppFactory,
    headers,
    make_course,
    make_template,
    outcomes,
    result_lines,
)
from userland.platform.clients.kube import USERLANDS, KubeClient
from userland.platform.model import naming


def userland_writes(client: KubeClient) -> int:
    return sum(n for (_verb, kind), n in client.writes.items() if kind == "Userland")


def csv_form(data: bytes, templates: list[str], filename: str = "roster.csv") -> aiohttp.FormData:
    form = aiohttp.FormData()
    for t in templates:
        form.add_field("template", t)
    form.add_field("file", data, filename=filename, content_type="text/csv")
    return form


async def _userlands(kube: KubeClient, namespace: str) -> dict[str, dict]:  # type: ignore[type-arg]
    items = (await kube.list(USERLANDS, namespace))["items"]
    return {u["metadata"]["name"]: u for u in items}


async def test_instructor_sees_the_form_with_the_courses_templates(kube: KubeClient, namespace: str,
                                                                    web_ui: AppFactory) -> None:
    await make_course(kube, namespace, title="Databases 101")
    await make_template(kube, namespace, "vscode", displayName="VS Code", description="Python and Node")
    await make_template(kube, namespace, "mariadb")
    as_user = await web_ui()
    status, page = await as_user(INSTRUCTOR).get(f"/courses/{namespace}/add")
    assert status == 200
    assert "Add students to Databases 101" in page
    assert 'value="vscode"' in page and 'value="mariadb"' in page and "Python and Node" in page
    assert "login,name,email,section" in page  # the CSV format, with an example
    assert 'name="csrf"' in page and 'enctype="multipart/form-data"' in page


async def test_one_login_is_added_then_already_there(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    status, page = await teacher.post(f"/courses/{namespace}/add", {"login": "@Alice", "template": "vscode"})
    assert status == 200, page
    assert outcomes(page) == [("alice", "Vscode", "created")]
    obj = (await _userlands(kube, namespace))[naming.userland_name("vscode", "alice")]
    assert obj["spec"]["user"] == "alice" and obj["spec"]["template"] == "vscode"
    assert obj["metadata"]["annotations"]["userland.dev/added-by"] == INSTRUCTOR
    assert f'href="/courses/{namespace}"' in page  # back to the dashboard
    status, page = await teacher.post(f"/courses/{namespace}/add", {"login": "alice", "template": "vscode"})
    assert status == 200
    assert outcomes(page) == [("alice", "Vscode", "exists")]
    assert "Already there" in page


async def test_csv_roster_reports_each_row_and_a_reimport_changes_nothing(
        kube: KubeClient, web_kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    await make_template(kube, namespace, "mariadb")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    roster = (b"login,name,email,section\n"
              b"alice,Alice Liddell,alice@example.edu,A\n"
              b"bob,Bob <b>Smith</b>,bob@example.edu,B\n"
              b"Not A Login!,Mallory,,\n"
              b"ALICE,Alice again,,\n")
    status, page = await teacher.post(f"/courses/{namespace}/add", csv_form(roster, ["vscode", "mariadb"]))
    assert status == 200, page
    # Each row names its CSV line (the header is line 1), and a bad login is shown as typed.
    lines = result_lines(page)
    assert [line for line, _ in lines] == ["2", "2", "3", "3", "4", "4", "5", "5"], lines
    assert ("4", "Not A Login!") in lines and ("5", "alice") in lines
    assert "duplicate of line 2" in page
    rows = outcomes(page)
    for login in ("alice", "bob"):
        for template in ("Vscode", "Mariadb"):
            assert (login, template, "created") in rows
    invalid = [login for login, _, outcome in rows if outcome == "invalid"]
    assert len(invalid) == 4  # the bad login and the duplicate, for each environment
    assert any("Not A Login!" in login for login in invalid)
    assert "duplicate" in page.lower()  # the second alice, with why
    assert "<b>Smith</b>" not in page  # autoescaped wherever it shows
    created = await _userlands(kube, namespace)
    assert set(created) == {"vscode-alice", "mariadb-alice", "vscode-bob", "mariadb-bob"}
    annotations = created["vscode-bob"]["metadata"].get("annotations") or {}
    assert annotations.get("userland.dev/email") == "bob@example.edu"
    assert annotations.get("userland.dev/section") == "B"
    versions = {name: u["metadata"]["resourceVersion"] for name, u in created.items()}

    writes_before = userland_writes(web_kube)  # the web UI's own client
    status, page = await teacher.post(f"/courses/{namespace}/add", csv_form(roster, ["vscode", "mariadb"]))
    assert status == 200
    rows = outcomes(page)
    assert ("alice", "Vscode", "exists") in rows and ("bob", "Mariadb", "exists") in rows
    assert "created" not in {outcome for _, _, outcome in rows}
    after = await _userlands(kube, namespace)
    assert {name: u["metadata"]["resourceVersion"] for name, u in after.items()} == versions
    assert userland_writes(web_kube) == writes_before


async def test_bad_uploads_get_a_clear_page_and_add_nobody(kube: KubeClient, namespace: str,
                                                           web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    url = f"/courses/{namespace}/add"

    status, page = await teacher.post(url, csv_form(b"login\nalice\n" + b"x" * (1_100_000), ["vscode"]))
    assert status == 400 and "at most 1 MiB" in page and "Nothing was added" in page
    status, page = await teacher.post(url, csv_form(b"login\n\xff\xfe\xfaalice\n", ["vscode"]))
    assert status == 400 and "UTF-8" in page
    status, page = await teacher.post(url, csv_form(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00",
                                                    ["vscode"], filename="photo.png"))
    assert status == 400 and "Nothing was added" in page
    status, page = await teacher.post(url, csv_form(b"name,email\nAlice,a@example.edu\n", ["vscode"]))
    assert status == 400 and "login" in page
    status, page = await teacher.post(url, csv_form(b"x" * (3 * 1024 * 1024), ["vscode"]))
    assert status == 413 and "too large" in page.lower()
    status, page = await teacher.post(url, {"login": "alice"})  # no environment ticked
    assert status == 400 and "Choose at least one environment" in page
    status, page = await teacher.post(url, {"login": "alice", "roster": "bob", "template": "vscode"})
    assert status == 400 and "one of them at a time" in page
    status, page = await teacher.post(url, {"login": "alice", "template": "nosuch"})
    assert status == 400 and "no environment called" in page
    assert "Traceback" not in page
    assert await _userlands(kube, namespace) == {}


async def test_assistants_and_students_cannot_add(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    url = f"/courses/{namespace}/add"
    assert (await as_user(ASSISTANT).get(url))[0] == 403
    status, page = await as_user(ASSISTANT).post(url, {"login": "eve", "template": "vscode"})
    assert status == 403 and "Not allowed" in page
    assert (await as_user("eve").get(url))[0] == 404
    assert (await as_user("eve").post(url, {"login": "eve", "template": "vscode"}))[0] == 404
    assert await _userlands(kube, namespace) == {}


async def test_forged_forms_are_refused_before_anything_happens(kube: KubeClient, namespace: str,
                                                                web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    url = f"/courses/{namespace}/add"
    form = {"login": "eve", "template": "vscode"}
    status, page = await teacher.post(url, form, csrf=None)
    assert status == 403 and "expired" in page
    status, _ = await teacher.post(url, form, csrf=as_user("eve").csrf)  # another login's token
    assert status == 403
    status, _ = await teacher.post(url, form, csrf="1.deadbeef")
    assert status == 403
    status, page = await teacher.post(url, form, origin="https://evil.test")
    assert status == 403 and "another site" in page
    assert await _userlands(kube, namespace) == {}


async def test_forms_that_cannot_be_read_get_a_400_page_not_a_bug_page(
        kube: KubeClient, namespace: str, web_ui: AppFactory) -> None:
    """Bodies no browser sends from the page (a text field that is not UTF-8, an unknown charset,
    a broken multipart body) were a 500 "this is a bug" page; they are a 400 that says what to do."""
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    teacher = (await web_ui())(INSTRUCTOR)
    url = f"/courses/{namespace}/add"
    token = teacher.csrf.encode()
    bodies: list[tuple[bytes, str]] = [
        (b"--b\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n" + token +
         b"\r\n--b\r\nContent-Disposition: form-data; name=\"login\"\r\n\r\n\xff\xfeve\r\n--b--\r\n",
         "multipart/form-data; boundary=b"),
        (b"csrf=" + token + b"&login=eve&template=vscode",
         "application/x-www-form-urlencoded; charset=bogus"),
        (b"\x00\x01 not multipart at all", "multipart/form-data; boundary=zzz"),
    ]
    for body, content_type in bodies:
        response = await teacher.client.post(url, data=body, headers={
            **headers(INSTRUCTOR, "student", origin=PUBLIC), "Content-Type": content_type})
        page = await response.text()
        assert response.status == 400, (content_type, page)
        assert "could not be read" in page and "bug" not in page
    assert await _userlands(kube, namespace) == {}


async def test_a_roster_of_500_in_one_upload(kube: KubeClient, web_kube: KubeClient, namespace: str,
                                             web_ui: AppFactory) -> None:
    await make_course(kube, namespace)
    await make_template(kube, namespace, "vscode")
    as_user = await web_ui()
    teacher = as_user(INSTRUCTOR)
    lines = ["Login,Name,Email,Section"] + [f"student-{i:03d},Student {i},s{i}@example.edu,{i % 4}"
                                            for i in range(500)]
    roster = ("\ufeff" + "\r\n".join(lines) + "\r\n").encode()  # a spreadsheet's CSV UTF-8, with its BOM
    status, page = await teacher.post(f"/courses/{namespace}/add", csv_form(roster, ["vscode"]))
    assert status == 200, page[:2000]
    assert "500 created" in page
    assert {o for _, _, o in outcomes(page)} == {"created"} and len(outcomes(page)) == 500
    assert len(await _userlands(kube, namespace)) == 500
    before = userland_writes(web_kube)
    status, page = await teacher.post(f"/courses/{namespace}/add", csv_form(roster, ["vscode"]))
    assert status == 200 and "500 already there" in page
    assert userland_writes(web_kube) == before
