"""What students must never read: cluster and platform words, and the "environment environment"
that a display name ending in "environment" used to give. Used by the tests that render every
student-facing page (the gateway's, and the web UI's "my environments")."""

from __future__ import annotations

import html
import re

JARGON = (
    "Deployment", "ReplicaSet", "replicas?", "pods?", "namespaces?", "containers?", "kubectl",
    "Kubernetes", "k8s", "clusters?", "nodes?", "PersistentVolumeClaim", "PVC", "images?",
    "CrashLoopBackOff", "BackOff", "ImagePull\\w*", "ProgressDeadlineExceeded", "spec", "podSpec",
    "reconcile", "operator", "gateway", "upstream", "templates?", "manifest", "YAML", "CSRF",
    "GET", "POST", "quota", "Ready=\\w+", "condition", "environment environment",
)
_JARGON_RE = re.compile(r"\b(?:" + "|".join(JARGON) + r")\b", re.IGNORECASE)


def visible_text(page: str) -> str:
    """The words a reader sees: no markup, styles, scripts or the <title> (the product's name)."""
    page = re.sub(r"<(style|script|title)\b.*?</\1>", " ", page, flags=re.DOTALL | re.IGNORECASE)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def jargon_in(page: str) -> list[str]:
    return sorted({m.group(0) for m in _JARGON_RE.finditer(visible_text(page))})
