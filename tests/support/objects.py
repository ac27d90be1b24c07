"""Template and Userland bodies as the API server takes them (the tests' usual shapes)."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def template_body(
    name: str, *, image: str = "demo:1", port: int = 8080, storage: JSON | None = None, **spec: Any
) -> JSON:
    body: JSON = {
        "apiVersion": "userland.dev/v1alpha1",
        "kind": "Template",
        "metadata": {"name": name},
        "spec": {
            "displayName": name.title(),
            "routing": {"host": f"{name}.example.edu"},
            "port": port,
            "podSpec": {
                "containers": [
                    {
                        "name": "ide",
                        "image": image,
                        "args": ["--user", "${USER}"],
                        "env": [{"name": "HOME_USER", "value": "/home/${USER}"}],
                        "ports": [{"containerPort": port}],
                    }
                ]
            },
            **spec,
        },
    }
    if storage is not None:
        body["spec"]["storage"] = storage
    return body


def userland_body(user: str, template: str, name: str | None = None, **spec: Any) -> JSON:
    return {
        "apiVersion": "userland.dev/v1alpha1",
        "kind": "Userland",
        "metadata": {"name": name or f"{template}-{user.lower()}"},
        "spec": {"user": user, "template": template, **spec},
    }
