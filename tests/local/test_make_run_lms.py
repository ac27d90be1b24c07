"""`make run`'s example LMS (local/example_lms.py): the whole LTI flow on one machine.

Real: everything `userland local` starts (control plane, Redis, operator, web UI, gateway,
runner) and its example LMS (lti1p3platform on loopback). The test is a browser: it opens the
LMS's course page from the banner, follows the course's link (the platform's login initiation,
the gateway's /lti/login, the platform's authorization endpoint), submits the form the LMS
answers to /lti/launch from the LMS's site, continues in Userland's own window, and lands in the
student's environment; the instructor lands on the class dashboard.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import free_port
from tests.support.make_run import HTML, lms_browser, lms_launch, userland_local

pytestmark = pytest.mark.make_run


@pytest.mark.slow
async def test_the_example_lms_opens_the_local_course_as_its_student_and_its_instructor(
    tmp_path: Path
) -> None:
    port = free_port()
    async with userland_local(port, tmp_path / "state", "--students", "alice") as banner:
        found = re.search(r"LMS\s+(http://127\.0\.0\.1:\d+)/", banner)
        assert found, banner
        lms = found.group(1)
        assert "the student alice" in banner and "instructor prof" in banner
        async with lms_browser(port) as alice:
            async with alice.get(f"{lms}/", headers=HTML) as course:
                text = await course.text()
                assert course.status == 200 and "Open Userland as Alice" in text, text
            async with await lms_launch(alice, port, lms, "student") as environment:
                page = await environment.text()
                assert environment.status == 200, page
                # Her own environment of the course, signed in as her, with no other sign-in.
                assert (environment.url.host, environment.url.path) == ("alice.demo.localhost", "/")
            assert '<code id="owner">alice</code>' in page and '<td id="signature">present</td>' in page

        async with lms_browser(port) as prof, await lms_launch(prof, port, lms, "instructor") as dashboard:
            text = await dashboard.text()
            assert dashboard.status == 200, text
            # The LMS course is linked already: its instructor is the course's instructor.
            assert dashboard.url.path == "/courses/classroom", dashboard.url
            assert "Classroom (local)" in text and 'id="student-alice"' in text
