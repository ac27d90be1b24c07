"""Where a file lives says what it may do (docs/architecture.md): the layout and its contracts
kept in step.

A module is pure because it lives in a pure package (platform/model/, or an app's rules/), and
import-linter's contracts name those packages, never their modules. What can still drift is
caught here: a module that calls itself pure but lives outside them, a pure package the contract
does not cover (or a contract entry no package answers), an app missing from the contract that
keeps rules below their app's I/O modules, a subpackage setuptools does not install.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The top-level folders by package name (userland.platform -> platform).
FOLDERS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
APPS = sorted(name for name in FOLDERS if name != "userland.platform")
PURE_CONTRACT = "pure packages do no I/O"
BELOW_CONTRACT = "an app's rules sit below its I/O modules"

# How a docstring says its own module is pure: "(pure)", "(pure; ...)", "(pure: no I/O)", "Pure:",
# "Pure,", "Pure.", "Pure functions ...", "pure rules", "pure builders", "the pure part"; not
# "(pure: operator/rules/wake.py, ...)", a reconciler naming the pure modules it calls.
SAYS_PURE = re.compile(
    r"\(pure(?:[;)]|: no\b)|(?:^|[.;]\s+)Pure\b|\bpure (?:rules?|functions|builders)\b|\bthe pure part\b",
    re.M,
)
# I/O modules whose docstring says one of their parts is pure, or names the pure functions they
# call; each with why it stays where it is.
NOT_PURE: dict[str, str] = {
    "userland.operator.loop": "names the pure functions the reconcilers decide with",
    "userland.local.supervisor": "restart_delay is pure; the Supervisor starts processes",
}


def _modules() -> dict[str, Path]:
    """Every module of the source tree, by its dotted name (a package by its __init__.py)."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _packages() -> set[str]:
    """Every subpackage (a folder with an __init__.py) of the top-level folders."""
    return {name for name, path in _modules().items() if path.name == "__init__.py"}


def _contract(name: str) -> dict[str, object]:
    [contract] = [c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["name"].startswith(name)]
    return contract


def _expand(expression: str, candidates: set[str]) -> set[str]:
    """import-linter's module wildcards: `*` stands for one whole name."""
    pattern = re.compile(r"\.".join(r"[^.]+" if part == "*" else re.escape(part)
                                    for part in expression.split(".")) + r"\Z")
    return {name for name in candidates if pattern.match(name)}


def _pure_packages() -> set[str]:
    """The pure packages by the convention: platform/model/ and every app's rules/."""
    return {name for name in _packages() if name == "userland.platform.model"
            or (name.endswith(".rules") and name.count(".") == 2)}


def _in(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _says_pure(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return bool(SAYS_PURE.search(doc))


def test_the_scan_tells_a_module_that_says_it_is_pure() -> None:
    for words in ("What the gateway does (pure).", "Help in the lab (pure; no I/O).",
                  "Data.\n\nPure: in, out.", "Rules. Pure functions, no I/O.",
                  "Who may: pure rules over namespaces.", "Zip names (pure: no I/O).",
                  "This module is the pure part: what a grant is."):
        assert SAYS_PURE.search(words), words
    for words in ("Reconciling: decide (operator/rules/wake.py: pure), write.",
                  "Reconciling: decide (pure: operator/rules/wake.py, operator/rules/status.py).",
                  "Fetching with git (`classify`, a pure function with a table test).",
                  "What the pure dashboard code reads."):
        assert not SAYS_PURE.search(words), words


def test_every_module_that_says_it_is_pure_lives_in_a_pure_package() -> None:
    pure = _pure_packages()
    astray = sorted(name for name, path in _modules().items()
                    if _says_pure(path) and not _in(name, pure) and name not in NOT_PURE)
    assert not astray, ("these modules say they are pure: move each into its app's rules/ (or "
                        f"platform/model/), or say in NOT_PURE why it stays: {astray}")


def test_the_exceptions_are_still_true() -> None:
    modules = _modules()
    stale = sorted(name for name in NOT_PURE if name not in modules or _in(name, _pure_packages()))
    assert not stale, f"NOT_PURE names modules that are gone or now pure: {stale}"


def test_the_contract_covers_exactly_the_pure_packages() -> None:
    packages = _packages()
    sources = _contract(PURE_CONTRACT)["source_modules"]
    assert isinstance(sources, list)
    covered: set[str] = set()
    for expression in sources:
        matched = _expand(expression, packages)
        assert matched, f"{expression!r} in the contract names no package"
        covered |= matched
    assert covered == _pure_packages()
    # A package nested in a pure one is covered through it (import-linter's sources are packages).
    stray = sorted(name for name in packages if name.rsplit(".", 1)[-1] in ("rules", "model")
                   and not _in(name, covered))
    assert not stray, f"named as a pure package, but out of the contract's reach: {stray}"


def test_every_app_has_its_rules_kept_below_it() -> None:
    contract = _contract(BELOW_CONTRACT)
    assert contract["source_modules"] == ["userland.*.rules"]
    forbidden = contract["forbidden_modules"]
    assert isinstance(forbidden, list)
    assert sorted(forbidden) == sorted(f"{app}.*" for app in APPS)


def test_the_platform_holds_only_its_model_and_its_clients() -> None:
    top = sorted(path.name for path in (REPO / FOLDERS["userland.platform"]).iterdir()
                 if path.suffix == ".py" or (path / "__init__.py").exists())
    assert top == ["clients", "model"], "platform/ has model/ (pure) and clients/ (I/O), nothing else"


def test_every_subpackage_is_installed() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    missing = sorted(_packages() - listed)
    assert not missing, f"add to pyproject.toml [tool.setuptools] packages: {missing}"
