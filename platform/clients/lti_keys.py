"""The tool's keys in their Secret (platform/model/lti_keys.py says the layout and the rules):
read them, make the first one when there is none, add one for a rotation.

Only the components that sign with the keys (the gateway: /lti/jwks; the LTI service clients)
read this Secret; their RBAC names it and nothing else.
"""

from __future__ import annotations

import logging
import secrets
import time

from cryptography.hazmat.primitives.asymmetric import rsa

from userland.platform.clients.kube import SECRETS, Conflict, KubeClient, NotFound
from userland.platform.model.lti_keys import (
    TOOL_KEYS_SECRET,
    ToolKey,
    kid_for,
    parse_secret,
    rotated,
    secret_data,
)

log = logging.getLogger(__name__)


def new_key(now: float | None = None) -> ToolKey:
    created = float(int(time.time() if now is None else now))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ToolKey(kid=kid_for(created, secrets.token_hex(4)), created=created, private_key=key)


async def read_keys(kube: KubeClient, namespace: str, name: str = TOOL_KEYS_SECRET) -> list[ToolKey]:
    """The keys in the Secret, oldest first ([] when it does not exist). Entries that are not
    keys are logged (by name, never content) and left out."""
    try:
        secret = await kube.get(SECRETS, namespace, name)
    except NotFound:
        return []
    keys, problems = parse_secret(secret.get("data"))
    for problem in problems:
        log.warning("an LTI tool key entry was ignored", extra={"event": "lti.key_ignored",
                                                                "secret": f"{namespace}/{name}",
                                                                "problem": problem})
    return keys


async def ensure_keys(kube: KubeClient, namespace: str, name: str = TOOL_KEYS_SECRET) -> list[ToolKey]:
    """The keys, after making the Secret with one new key when it does not exist (two replicas
    starting together: the one whose create loses reads the winner's)."""
    keys = await read_keys(kube, namespace, name)
    if keys:
        return keys
    key = new_key()
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "userland"}},
            "data": secret_data([key])}
    try:
        await kube.create(SECRETS, namespace, body)
    except Conflict:
        return await read_keys(kube, namespace, name)
    log.info("made the LTI tool key", extra={"event": "lti.key_created", "kid": key.kid})
    return [key]


async def rotate_keys(kube: KubeClient, namespace: str, name: str = TOOL_KEYS_SECRET,
                      now: float | None = None) -> list[ToolKey]:
    """Add a new key (it signs once published long enough) and drop all but the newest two."""
    keys = rotated(await read_keys(kube, namespace, name), new_key(now))
    try:
        await kube.replace(SECRETS, namespace, name, {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "userland"}},
            "data": secret_data(keys)})
    except NotFound:
        await kube.create(SECRETS, namespace, {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "userland"}},
            "data": secret_data(keys)})
    log.info("rotated the LTI tool key", extra={"event": "lti.key_rotated", "kids": [k.kid for k in keys]})
    return keys
