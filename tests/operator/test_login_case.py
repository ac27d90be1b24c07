"""A login written with capitals (`user: Alice`, as an admin may copy it from GitHub) is the
same student everywhere: the operator, the gateway and the web UI compare logins in lower case.

Real: the API server (which accepts `Alice`, as the CRD's pattern allows), the operator's
Controller, the gateway's RoutingCache and the web UI's ClassState and add_students, all
watching or calling it. docs/decisions.md says why this is tolerated rather than refused.
"""

from __future__ import annotations

from typing import Any

from tests.operator.support import Cluster, OperatorRunner
from tests.support import eventually
from tests.support.objects import template_body, userland_body
from tests.web.support import make_course
from userland.platform.clients.kube import DEPLOYMENTS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming
from userland.proxy.routes_cache import RoutingCache
from userland.web.actions import add_students
from userland.web.rules.roster import RosterRow
from userland.web.state import running


async def test_a_capitalised_login_is_the_same_student_for_every_part(
    cluster: Cluster, kube: KubeClient, namespace: str, run_operator: OperatorRunner
) -> None:
    await make_course(kube, namespace)
    await kube.create(TEMPLATES, namespace, template_body("ide"))
    await kube.create(TEMPLATES, namespace, template_body("db"))
    stored = await kube.create(USERLANDS, namespace, userland_body("Alice", "ide"))  # as kubectl would
    assert stored["spec"]["user"] == "Alice"  # the API server keeps what was written
    await kube.create(USERLANDS, namespace, userland_body("alice", "db"))  # as the web UI writes
    routes = RoutingCache(kube, [namespace])
    await routes.start()
    try:
        async with run_operator(), running(kube) as web_state:
            # The operator: lower-case children, labels and address.
            deployment = await eventually(lambda: _get(kube, DEPLOYMENTS, namespace, "ide-alice"))
            assert deployment["metadata"]["labels"][naming.LABEL_USER] == "alice"

            async def url() -> Any:
                return ((await kube.get(USERLANDS, namespace, "ide-alice")).get("status") or {}).get("url")

            assert await eventually(url) == "https://alice.ide.example.edu/"
            # Once the replicaset controller has made the Pod.
            await eventually(lambda: cluster.make_pods_ready("userland.dev/template=ide"))

            # The gateway: alice's session finds it, ready.
            async def routed() -> bool:
                state = routes.userland(namespace, "ide", "alice")
                return state is not None and state.ready and state.name == "ide-alice"

            await eventually(routed)

            # The web UI: one student with both environments, on /me and the dashboard.
            async def one_row() -> Any:
                found = web_state.environments_of("alice")
                return found if found and len(found[0][1].environments) == 2 else None

            ((_, row),) = await eventually(one_row)
            assert row.login == "alice" and {e.name for e in row.environments} == {"ide-alice", "db-alice"}
            # Adding alice again finds her, under whatever case: no second environment.
            results = await add_students(kube, namespace, ["ide"], [RosterRow(line=2, login="ALICE")],
                                         actor="teacher")
            assert [(r.login, r.outcome) for r in results] == [("alice", "exists")]

            # A second one for her written `ALICE`: the operator calls it a duplicate, and the
            # gateway keeps serving the ready one.
            await kube.create(USERLANDS, namespace, userland_body("ALICE", "ide", name="ide-alice-again"))

            async def duplicate() -> Any:
                status = (await kube.get(USERLANDS, namespace, "ide-alice-again")).get("status") or {}
                return [c for c in status.get("conditions") or [] if c.get("reason") == "Duplicate"]

            await eventually(duplicate)
            await eventually(routed)
            names = {u["metadata"]["name"] for u in (await kube.list(USERLANDS, namespace))["items"]}
            assert names == {"ide-alice", "db-alice", "ide-alice-again"}
    finally:
        await routes.stop()


async def _get(kube: KubeClient, resource: Any, ns: str, name: str) -> Any:
    items = (await kube.list(resource, ns))["items"]
    return next((i for i in items if i["metadata"]["name"] == name), None)
