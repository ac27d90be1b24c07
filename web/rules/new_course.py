"""The new-course form the LMS linking page shows admins (web/lti_new_course.py): pure."""

from __future__ import annotations

from dataclasses import dataclass

from userland.platform.model.course_request import suggested_name
from userland.web.rules.lti_link import Decision, LaunchCourse


@dataclass(frozen=True)
class Offer:
    """The new-course form an admin is shown: a suggested name and the environments to copy."""

    name: str
    title: str
    choices: tuple[tuple[str, str], ...]  # (value "namespace/template", label)


def offer(is_admin: bool, launch: LaunchCourse | None, decision: Decision) -> Offer | None:
    if not is_admin or launch is None or decision.outcome not in ("choose", "nothing-to-choose"):
        return None
    choices = tuple((f"{c.course.namespace}/{t}", f"{t} (from {c.course.title})")
                    for c in decision.choices for t in c.templates)
    if not choices:
        return None
    title = launch.title or launch.context
    return Offer(suggested_name(title), title, choices)
