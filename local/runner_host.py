"""What the local runner prepares on this machine for the Pods it runs: where their folders live,
the environment and programs their containers start with, the reaper that stops them whatever
ends the runner, and the folders of the apps `make local-apps` installed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from userland.coursework import worker as coursework_worker
from userland.local.rules.podplan import PLATFORM_PROGRAM
from userland.local.users import LocalUser
from userland.platform.model.settings import LocalTools

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def environment_roots(state_dir: Path, user: LocalUser) -> Path:
    """Where Pods' folders live: under the state dir, unless the environments' user cannot
    reach it (a repository under root's private home): then under /var/lib, linked from it."""
    root = state_dir / "environments"
    if not user.switches or _reachable(state_dir, user):
        return root
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    elsewhere = Path("/var/lib/userland-local") / digest
    elsewhere.mkdir(parents=True, exist_ok=True)
    elsewhere.parent.chmod(0o755)
    elsewhere.chmod(0o755)
    if not root.is_symlink():
        if root.exists():
            shutil.rmtree(root)
        root.symlink_to(elsewhere)
    return elsewhere


def _reachable(folder: Path, user: LocalUser) -> bool:
    """Whether `user` (not the owner) may pass through every folder on the way to `folder`."""
    for part in [folder.resolve(), *folder.resolve().parents]:
        info = part.stat()
        if info.st_uid != user.uid and not info.st_mode & 0o001:
            return False
    return True


def base_environment(user: LocalUser, app_bins: Iterable[Path]) -> dict[str, str]:
    """What a container's environment starts from (never the runner's own: it may hold secrets)."""
    path = ":".join([*(str(p) for p in app_bins), SYSTEM_PATH])
    return {
        "PATH": path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "SHELL": "/bin/bash",
        "USER": user.name,
        "LOGNAME": user.name,
    }


def own_program(python: str, user: LocalUser, bin_dir: Path) -> str | None:
    """Write `<bin_dir>/userland`: the platform's own command (what its image runs) from this
    installation, as the account environments run as can run it; None when it cannot.

    The runner's interpreter may sit where that account cannot go (a pyenv under /root): then
    the system's Python of the same version runs it, with this installation's packages (its
    site-packages, whose .pth files map the editable install) added."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(python), Path(python).resolve(), Path("/usr/bin") / version,
                  Path("/usr/local/bin") / version]
    interpreter = next((c for c in candidates if c.exists() and (
        not user.switches or _reachable(c.resolve().parent, user))), None)
    sites = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    package = Path(coursework_worker.__file__).resolve().parent
    if interpreter is None or (user.switches and not all(_reachable(f, user) for f in (*sites, package))):
        return None
    bin_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.chmod(0o755)
    program = bin_dir / PLATFORM_PROGRAM
    program.write_text(f"#!{interpreter}\n"
                       "# The platform's own command, as the local runner runs it for worker Pods.\n"
                       "import site, sys\n"
                       + "".join(f"site.addsitedir({str(s)!r})\n" for s in sites)
                       + "from userland.cli.main import main\nsys.exit(main())\n")
    program.chmod(0o755)
    return str(program)


class Reaper:
    """A process that stops every container the ledger still names once this one ends,
    however it ends (local/reaper.py): it waits on a pipe only we hold the writing end of."""

    def __init__(self, process: subprocess.Popen[bytes], pipe: int) -> None:
        self.process = process
        self.pipe = pipe

    @classmethod
    def start(cls, python: str, ledger: Path, log_path: Path) -> Reaper:
        read_end, write_end = os.pipe()  # not inherited by anything else we start
        with open(log_path, "ab") as output:
            process = subprocess.Popen(
                [python, "-m", "userland.local.reaper", str(ledger)], stdin=read_end, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True)
        os.close(read_end)
        return cls(process, write_end)

    async def stop(self) -> None:
        """Our containers are stopped: let it go (it finds nothing) and wait for it."""
        with contextlib.suppress(OSError):
            os.close(self.pipe)
        await asyncio.to_thread(self.process.wait)


def app_bin_dirs(env: dict[str, str] | None = None, repo: Path | None = None) -> list[Path]:
    """Folders of the programs installed for local environments (`make local-apps`):
    `USERLAND_APPS_BIN` (the Makefile sets it), else where the install script puts them."""
    folders = [Path(f) for f in LocalTools.from_env(env).apps_bin]
    if not folders and repo is not None and (repo / "scripts/install-local-apps.sh").exists():
        result = subprocess.run(
            ["bash", str(repo / "scripts/install-local-apps.sh"), "--print-prefix"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0 and result.stdout.strip():
            folders = [Path(result.stdout.strip()) / "bin"]
    return [f for f in folders if f.is_dir()]
