"""The API server's decoder errors (400) reach callers in words a person can act on.

Real: the kube-apiserver (tests/conftest.py). Each case sends what an admin could write in a
Template's podSpec, as the operator's dry run does, and checks the message our client raises.
"""

from __future__ import annotations

from typing import Any

import pytest

from userland.platform.clients.kube import DEPLOYMENTS, Invalid, KubeClient
from userland.platform.model.api_errors import QUANTITY_HELP


def deployment(container: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": "x"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                     "spec": {"containers": [{"name": "main", "image": "i"}, {"name": "db", "image": "j",
                                                                              **container}]}}}}


CONTAINERS = "spec.template.spec.containers[]"
CASES = [
    ({"resources": {"limits": {"memory": "1Gb"}}},
     f'{CONTAINERS}.resources.limits.memory: "1Gb" is not a valid quantity: {QUANTITY_HELP} '
     '("Gb" is not a unit: did you mean "1Gi"?)'),
    ({"resources": {"requests": {"cpu": "half"}}},
     f'{CONTAINERS}.resources.requests.cpu: "half" is not a valid quantity: {QUANTITY_HELP}'),
    ({"resources": {"requests": {"memory": "512 Mi"}}},
     f'{CONTAINERS}.resources.requests.memory: "512 Mi" is not a valid quantity: {QUANTITY_HELP} '
     "(no space between the number and the unit)"),
    ({"ports": [{"containerPort": "http"}]},
     f'{CONTAINERS}.ports[].containerPort: "http" must be a number'),
    ({"args": "--port 80"},
     f'{CONTAINERS}.args: "--port 80" must be a list'),
    ({"stdin": "yes"},
     f'{CONTAINERS}.stdin: "yes" must be true or false'),
]


@pytest.mark.parametrize(("container", "expected"), CASES, ids=[str(c[0]) for c in CASES])
async def test_decoder_errors_are_readable(kube: KubeClient, namespace: str, container: dict[str, Any],
                                           expected: str) -> None:
    with pytest.raises(Invalid) as refused:
        await kube.create(DEPLOYMENTS, namespace, deployment(container), dry_run=True)
    assert refused.value.status == 400
    assert refused.value.message == expected
    assert "unmarshalerDecoder" not in str(refused.value) and "bigger context" not in str(refused.value)


async def test_a_422_keeps_the_api_servers_own_words(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(Invalid) as refused:
        await kube.create(DEPLOYMENTS, namespace, deployment({"resources": {"limits": {"memory": "-1Gi"}}}),
                          dry_run=True)
    assert refused.value.status == 422
    assert refused.value.message.endswith(
        'spec.template.spec.containers[1].resources.limits[memory]: Invalid value: "-1Gi": '
        "must be greater than or equal to 0")
