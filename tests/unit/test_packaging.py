"""Packaging: the wheel holds every module, and the repo root never shadows the stdlib."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = ["platform", "operator", "auth", "proxy", "web", "cli", "local", "coursework"]


def test_top_level_folders_have_no_init() -> None:
    # An __init__.py there would make `import platform` from the repo root load ours.
    for folder in TOP_LEVEL:
        assert not (REPO / folder / "__init__.py").exists(), folder


def test_pytest_runs_from_the_repo_root() -> None:
    # `python -m pytest` imports the stdlib `platform` module early; shadowing breaks it.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--version"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    probe = subprocess.run(
        [sys.executable, "-c", "import platform, operator; print(platform.system(), operator.add(2, 3))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.split() == ["Linux", "5"], probe.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [built] = list(out.glob("userland-*.whl"))
    return built


def test_the_wheel_contains_every_module_of_the_source_tree(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"userland/{path.relative_to(REPO).as_posix()}"
        for folder in TOP_LEVEL
        for path in (REPO / folder).rglob("*.py")
    }
    assert expected and expected <= names, sorted(expected - names)


def test_every_module_imports_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
        modules = sorted(
            n[:-3].replace("/", ".")
            for n in archive.namelist()
            if n.startswith("userland/") and n.endswith(".py")
        )
    script = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    importlib.import_module(m)\n"
        "print('ok', len(sys.argv) - 1)"
    )
    # Only the unpacked wheel and the installed dependencies: -S skips the .pth files, so
    # the editable install of the source tree is not on the path.
    deps = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{deps}", "PYTHONSAFEPATH": "1"}
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, *modules],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok {len(modules)}"
    where = subprocess.run(
        [sys.executable, "-S", "-c", "import userland.platform.model.naming as n; print(n.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(tmp_path / "site")), where.stdout + where.stderr


def test_the_aiohttp_pin_comment_names_every_module_allowed_its_internals() -> None:
    """The import-linter contract allows aiohttp's private modules in named modules only; the
    comment on the pin says which (an upgrade of aiohttp must look at each of them)."""
    import tomllib

    text = (REPO / "pyproject.toml").read_text()
    config = tomllib.loads(text)
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "private_submodules"]
    assert contract["package"] == "aiohttp"
    lines = text.splitlines()
    pin = next(i for i, line in enumerate(lines) if line.strip().startswith('"aiohttp>='))
    comment = []
    for line in reversed(lines[:pin]):
        if not line.strip().startswith("#"):
            break
        comment.append(line)
    named = " ".join(comment)
    for module in contract["allowed_importers"]:
        folder, name = module.removeprefix("userland.").split(".")
        assert f"{folder}/{name}.py" in named, module


@pytest.mark.parametrize(("line", "modules"), [
    ("from aiohttp import web", ["aiohttp"]),
    ("from aiohttp.client_proto import ResponseHandler", ["aiohttp.client_proto"]),
    ("    from aiohttp.http_parser import (", ["aiohttp.http_parser"]),
    ("import aiohttp.streams as streams, json", ["aiohttp.streams"]),
    ("import aiohttp", ["aiohttp"]),
    ("from aiohttp_jinja2 import x", []),
    ("from yarl import URL", []),
])
def test_the_contract_reads_import_lines(line: str, modules: list[str]) -> None:
    from _importlinter_private import imported_modules  # the repo root (pytest's pythonpath)

    assert imported_modules(line, "aiohttp") == modules
