"""Does the operator's cached copy of a Deployment go stale under a class waking at once?
(run by hand: `.venv/bin/python bench/stale_cache_probe.py [--students 300] [--rounds 2]`)

On one fresh real control plane, the operator in this process on a clock the probe moves: N
students' environments are created, put to sleep (the clock jumps two hours), then the whole
class is started (`userland.dev/wake-all`) with the wake line opened wide, so N Deployments are
scaled 0 -> 1 within seconds while the deployment controller writes each one's status. Once
all is quiet, every cached Deployment is compared with the API server's. Measured, per round:

  stale_puts   write responses older than the cache already was (kept out by the informer;
               each is a Deployment whose cache an unconditional put rolled back);
  behind       Deployments whose cached copy is older than the server's once all is quiet;
  conflicts    409s meeting the operator's Deployment replaces (it re-reads and retries once).

`--unguarded` runs the same with the informer's put() as it was before (store whatever was
written), side by side in one run when given with `--both`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.clock import ManualClock  # noqa: E402
from userland.local.controlplane import ControlPlane, crd_files  # noqa: E402
from userland.operator.controller import Controller  # noqa: E402
from userland.platform.clients.informer import Informer, object_key, version_number  # noqa: E402
from userland.platform.clients.kube import (  # noqa: E402
    DEPLOYMENTS,
    NAMESPACES,
    TEMPLATES,
    USERLANDS,
    Conflict,
    KubeClient,
)
from userland.platform.model import naming  # noqa: E402
from userland.platform.model.settings import Settings  # noqa: E402

GUARDED_PUT = Informer.put


def unguarded_put(self: Informer, obj: dict[str, Any]) -> bool:
    """put() as it was: the write's response replaces whatever the cache holds."""
    obj = self._typed(obj)
    self._set(object_key(obj), obj)
    return True


async def until(check: Any, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def one_round(plane: ControlPlane, students: int, namespace: str, guarded: bool) -> dict[str, Any]:
    Informer.put = GUARDED_PUT if guarded else unguarded_put  # type: ignore[method-assign]
    kube = await KubeClient.connect(str(plane.kubeconfig))
    client = await KubeClient.connect(str(plane.kubeconfig), pool_size=48)
    conflicts = 0
    replace = client.replace

    async def counting_replace(*args: Any, **kwargs: Any) -> Any:
        nonlocal conflicts
        try:
            return await replace(*args, **kwargs)
        except Conflict:
            conflicts += 1
            raise

    client.replace = counting_replace  # type: ignore[method-assign]
    await kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    await kube.create(TEMPLATES, namespace, {
        "apiVersion": naming.API_VERSION, "kind": "Template", "metadata": {"name": "vscode"},
        "spec": {"routing": {"host": "vscode.example.edu"}, "port": 8080, "idleTimeout": "1h",
                 "podSpec": {"containers": [{"name": "ide", "image": "ide:1"}]}}})
    sem = asyncio.Semaphore(20)

    async def add(i: int) -> None:
        async with sem:
            login = f"s{i:04d}"
            await kube.create(USERLANDS, namespace, {
                "apiVersion": naming.API_VERSION, "kind": "Userland", "metadata": {"name": f"vscode-{login}"},
                "spec": {"user": login, "template": "vscode"}})

    await asyncio.gather(*(add(i) for i in range(students)))
    clock = ManualClock(datetime.now(UTC))
    settings = Settings(namespaces=(namespace,), public_url="https://u.example.edu",
                        wake_rate=10_000.0, wake_burst=students)
    controller = Controller(client, settings, workers=16, clock=clock, start_timeout=None)
    tasks = [asyncio.create_task(controller.run_informers()), asyncio.create_task(controller.lead())]

    async def replicas(want: int) -> bool:
        items = (await kube.list(DEPLOYMENTS, namespace))["items"]
        return len(items) == students and all(d["spec"]["replicas"] == want for d in items)

    try:
        await until(lambda: replicas(1), "every environment created")
        clock.advance(2 * 3600)
        controller.enqueue_all(low=True)
        await until(lambda: replicas(0), "every environment asleep")
        deployments = controller.caches.deployments
        puts_before, conflicts_before = deployments.stale_puts, conflicts
        woke = time.monotonic()
        await kube.merge_patch(TEMPLATES, namespace, "vscode", {"metadata": {"annotations": {
            naming.ANNOTATION_WAKE_ALL: clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")}}})
        await until(lambda: replicas(1), "every environment awake")
        wake_seconds = time.monotonic() - woke
        await asyncio.sleep(10)  # a probe, not a test: let the last watch events arrive
        listing = (await kube.list(DEPLOYMENTS, namespace))["items"]
        served = {d["metadata"]["name"]: version_number(d) for d in listing}
        behind = sorted(name for name, version in served.items()
                        if (version_number(deployments.get(namespace, name)) or 0) < (version or 0))
        return {"guarded": guarded, "students": students, "wake_seconds": round(wake_seconds, 1),
                "stale_puts": deployments.stale_puts - puts_before,
                "conflicts": conflicts - conflicts_before, "behind": len(behind), "behind_names": behind[:5]}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await controller.events.close()
        controller.queue.close()
        await client.close()
        await kube.delete(NAMESPACES, None, namespace)
        await kube.close()
        Informer.put = GUARDED_PUT  # type: ignore[method-assign]


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    state = Path(tempfile.mkdtemp(prefix="userland-probe-"))
    plane = ControlPlane(state_dir=state).start(crd_files())
    results = []
    try:
        modes = [True, False] if args.both else [not args.unguarded]
        for n in range(args.rounds):
            for guarded in modes:  # interleaved: the machine is shared and noisy
                result = await one_round(plane, args.students, f"probe-{n}-{int(guarded)}", guarded)
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        plane.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--unguarded", action="store_true", help="put() as it was before the fix")
    parser.add_argument("--both", action="store_true", help="guarded and unguarded, interleaved")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
