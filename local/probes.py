"""Readiness and liveness probes, run the way the kubelet runs them: an HTTP GET that counts as
success for a status from 200 to 399 (redirects are not followed), a TCP connect, or a command
that exits 0, each within the probe's timeout, against the Pod's own address."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import aiohttp

from userland.local.rules.podplan import Probe
from userland.local.users import LocalUser


async def http_probe(http: aiohttp.ClientSession, probe: Probe, address: str) -> tuple[bool, str]:
    url = f"http://{address}:{probe.port}{probe.path if probe.path.startswith('/') else '/' + probe.path}"
    try:
        async with http.get(
            url,
            headers=dict(probe.headers),
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=probe.timeout),
        ) as response:
            if 200 <= response.status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {response.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        return False, f"Get {url}: {type(err).__name__}"


async def tcp_probe(probe: Probe, address: str) -> tuple[bool, str]:
    try:
        async with asyncio.timeout(probe.timeout):
            _, writer = await asyncio.open_connection(address, probe.port)
    except (OSError, TimeoutError) as err:
        return False, f"dial tcp {address}:{probe.port}: {type(err).__name__}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def exec_probe(probe: Probe, *, env: Mapping[str, str], cwd: str, user: LocalUser) -> tuple[bool, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            *probe.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            **user.popen_kwargs(),
        )
    except OSError as err:
        return False, f"exec failed: {err.strerror or err}"
    try:
        async with asyncio.timeout(probe.timeout):
            output, _ = await process.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return False, f"command timed out after {probe.timeout:g}s"
    if process.returncode == 0:
        return True, ""
    tail = output.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return False, f"command exited with {process.returncode}: {tail[0][:200]}".rstrip(": ")


async def run_probe(
    probe: Probe,
    *,
    address: str,
    http: aiohttp.ClientSession,
    env: Mapping[str, str],
    cwd: str,
    user: LocalUser,
) -> tuple[bool, str]:
    """(success, why not) for one run of `probe`."""
    if probe.kind == "http":
        return await http_probe(http, probe, address)
    if probe.kind == "tcp":
        return await tcp_probe(probe, address)
    return await exec_probe(probe, env=env, cwd=cwd, user=user)
