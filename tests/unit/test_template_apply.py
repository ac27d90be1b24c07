"""What `userland local` does with an example Template it finds from an earlier run
(local/rules/template_apply.py): a user's change is kept, what it wrote itself follows this run."""

from __future__ import annotations

from typing import Any

import pytest

from userland.local.rules import template_apply as ta

SHIPPED = {"metadata": {"name": "vscode", "namespace": "classroom"},
           "spec": {"displayName": "VS Code", "port": 8080, "idleTimeout": "2h",
                    "podSpec": {"containers": [{"name": "code-server", "image": "x"}]}}}
# What the API server stores for it: its defaults added.
STORED_SPEC = {**SHIPPED["spec"], "selfService": False, "podSpec": {
    "containers": [{"name": "code-server", "image": "x", "imagePullPolicy": "Always"}]}}


def found(spec: dict[str, Any], record: str | None) -> dict[str, Any]:
    annotations = {} if record is None else {ta.APPLIED_ANNOTATION: record}
    return {"metadata": {"name": "vscode", "annotations": annotations}, "spec": spec}


def changed(**fields: Any) -> dict[str, Any]:
    return {**STORED_SPEC, **fields}


def test_idle_sets_the_idle_timeout_and_leaves_the_shipped_one_alone() -> None:
    wanted = ta.desired(SHIPPED, "1m")
    assert wanted["spec"]["idleTimeout"] == "1m" and SHIPPED["spec"]["idleTimeout"] == "2h"
    assert ta.desired(SHIPPED, None) == SHIPPED


@pytest.mark.parametrize(("current", "step"), [
    (None, "create"),
    # As stored after our write (the server's defaults added): nothing to do.
    (found(STORED_SPEC, ta.spec_digest(STORED_SPEC)), "same"),
    (found(STORED_SPEC, None), "same"),                      # from before the record existed
    (found(changed(displayName="Mine"), None), "kept"),      # unknown origin, differs: kept
    # Ours from an older version (its record matches what is there): follows this run.
    (found(changed(port=9000), ta.spec_digest(changed(port=9000))), "update"),
    # The user set idleTimeout after our write: kept.
    (found(changed(idleTimeout="1m"), ta.spec_digest(STORED_SPEC)), "kept"),
    (found(changed(idleTimeout="1m"), ta.RESET), "update"),  # asked for the shipped one back
])
def test_the_step_for_what_is_found(current: dict[str, Any] | None, step: str) -> None:
    assert ta.step(current, SHIPPED) == step


def test_another_idle_next_time_follows_when_untouched() -> None:
    stored = found(changed(idleTimeout="1m"), ta.spec_digest(changed(idleTimeout="1m")))
    assert ta.step(stored, ta.desired(SHIPPED, "1m")) == "same"
    assert ta.step(stored, SHIPPED) == "update"  # IDLE dropped: back to the shipped 2h


def test_the_record_is_of_the_spec_as_stored() -> None:
    patch = ta.record_patch({"metadata": {}, "spec": STORED_SPEC})
    assert patch == {"metadata": {"annotations": {ta.APPLIED_ANNOTATION: ta.spec_digest(STORED_SPEC)}}}


@pytest.mark.parametrize("text", ["1m", "90s", "2h", " 1m "])
def test_idle_values(text: str) -> None:
    assert ta.parse_idle(text) == text.strip()


@pytest.mark.parametrize(("text", "words"), [("soon", "is not a duration"), ("1", "is not a duration"),
                                             ("5s", "too short")])
def test_bad_idle_values_say_what_to_write(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ta.parse_idle(text)


def test_the_banner_says_how_to_take_the_shipped_one_back() -> None:
    words = ta.kept_words(["vscode"], "classroom")
    assert words.startswith("vscode kept as changed here")
    assert f"{ta.APPLIED_ANNOTATION}={ta.RESET}" in words
