"""What the benchmarks share about the processes they run: free ports, uvloop, a process under
test with its RSS and CPU time (`Proc`), and waiting until one answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from userland.local.controlplane import free_port as free_port  # the project's one choice of ports


def use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        """The process and its children (a multi-worker gateway's workers)."""
        found = [self.proc.pid]
        for pid in list(found):
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                found.extend(int(c) for c in children)
        return found

    def rss_mib(self) -> float:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    def cpu_seconds(self) -> float:
        ticks = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_http(url: str, timeout: float = 90, headers: dict[str, str] | None = None,
                    proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            if proc is not None and proc.proc.poll() is not None:
                raise RuntimeError(f"{proc.name} exited:\n{proc.log.read_text()[-3000:]}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url, headers=headers) as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready in {timeout}s")
            await asyncio.sleep(0.2)
