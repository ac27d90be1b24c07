"""The bodies of objects that more than one component creates, built in one place.

A Userland is created by the web UI (adding students), the gateway (self-service) and the
local setup (its example students); each used to build the body itself, and they had drifted
(only one escaped its label values). Pure: plain data in, a JSON body out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from userland.platform.model import naming

JSON = dict[str, Any]


def userland_body(template: str, login: str, *, namespace: str | None = None,
                  annotations: Mapping[str, str] | None = None) -> JSON:
    """The Userland that gives `login` the Template `template`: named `<template>-<login>`
    (naming.userland_name), labelled with both (label values shortened when too long), the
    given annotations, if any. `login` must be a valid login (naming.normalize_login)."""
    login = naming.normalize_login(login)
    metadata: JSON = {
        "name": naming.userland_name(template, login),
        "labels": {naming.LABEL_USER: naming.label_value(login),
                   naming.LABEL_TEMPLATE: naming.label_value(template)},
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "Userland",
        "metadata": metadata,
        "spec": {"user": login, "template": template},
    }
