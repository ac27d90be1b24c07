"""The documentation is ordered by topic and its links lead somewhere.

- No markdown heading in README.md, SECURITY.md or docs/ names an issue number or a review
  round ("issue 20", "#20", "second attack review", "round 2"): a reader looks for a topic, and
  the history of who asked for what stays in git.
- Every relative link in README.md, SECURITY.md and docs/ (pages and images) resolves to a file
  or folder of the repository, and a link to a heading (`file.md#anchor`, `#anchor`) to a
  heading that exists, as GitHub makes its anchors: moving or renaming a section breaks a test,
  not a reader's click.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", REPO / "SECURITY.md", *(REPO / "docs").rglob("*.md")])

# What a heading must not say: an issue by number, or a review round.
HISTORY = re.compile(
    r"\bissues?\s*#?\d+"                       # issue 20, issues 6 and 7, issue #20
    r"|(?<![\w&/])#\d+\b"                      # #20
    r"|\b(?:attack|security)\s+review\b"       # attack review of ...
    r"|\b(?:first|second|third|fourth|fifth|another|last|next)\s+(?:\w+\s+)?review\b"
    r"|\breview\s+round\b"
    r"|\bround\b(?![\s-]trips?\b)",            # round 2, this round; not "round trips"
    re.IGNORECASE)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text without fenced code blocks (they may hold anything)."""
    return FENCE.sub("", text)


def headings(text: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(#{1,6})\s+(.*?)\s*#*\s*$", _prose(text), re.MULTILINE)]


def names_history(heading: str) -> bool:
    return HISTORY.search(heading) is not None


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in headings(text):
        slug = anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(text: str) -> list[str]:
    prose = CODE.sub("", _prose(text))
    return [target for target in LINK.findall(prose)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)]  # http:, mailto: ...


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in relative_links(path.read_text()):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if file_part and not dest.exists():
            problems.append(f"{target}: no such file")
        elif (fragment and dest.suffix == ".md" and dest.is_file()
              and fragment not in anchors(dest.read_text())):
            problems.append(f"{target}: no heading with that anchor in {_shown(dest)}")
    return problems


@pytest.mark.parametrize("heading, named", [
    ("Second attack review of help in the lab (issue 20)", True),
    ("Sleep and wake (issue 9)", True),
    ("Attack review of assignments", True),
    ("Issue 17: floods, the internal listener", True),
    ("Fixed in #20", True),
    ("What the third review found", True),
    ("Round 2: floods", True),
    ("Found in this round", True),
    ("Help in the lab", False),
    ("Redis round trips per request", False),
    ("Roster upload (`bench/web_pages_bench.py --rounds 5`)", False),
    ("Signed out, a tab's background request gets 503, not 401", False),
    ("The names, records and walks attacked again", False),
])
def test_the_heading_rule_tells_history_from_topics(heading: str, named: bool) -> None:
    assert names_history(heading) is named


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_heading_names_an_issue_or_a_review_round(path: Path) -> None:
    named = [h for h in headings(path.read_text()) if names_history(h)]
    assert not named, f"{path.relative_to(REPO)}: headings name history, not a topic: {named}"


def test_anchors_are_made_as_github_makes_them() -> None:
    assert anchor("`make test-cluster`: `deploy/` on a real node") == (
        "make-test-cluster-deploy-on-a-real-node")
    assert anchor("Identity, sessions and origins") == "identity-sessions-and-origins"
    assert anchor("The web UI's form tokens end with the session") == (
        "the-web-uis-form-tokens-end-with-the-session")
    assert anchors("# A\n## B\n## B\n```\n# not a heading\n```\n") == {"a", "b", "b-1"}


def test_links_are_read_outside_code_only() -> None:
    text = ("See [the docs](docs/help.md#asking-for-help), ![a picture](docs/screenshots/x.png), "
            "[GitHub](https://github.com/) and `[not](a-link.md)`.\n```\n[nor](this.md)\n```\n")
    assert relative_links(text) == ["docs/help.md#asking-for-help", "docs/screenshots/x.png"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_a_heading_that_exist(path: Path) -> None:
    assert broken_links(path) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = REPO / "docs" / "help.md"
    assert broken_links(page) == []
    moved = tmp_path / "page.md"
    moved.write_text("[gone](nothing-here.md) and [no heading](#nowhere)\n# Here\n")
    assert broken_links(moved) == ["nothing-here.md: no such file",
                                   "#nowhere: no heading with that anchor in page.md"]
