"""The operator's watch caches, their indexes, and which keys each change puts on the queue.

Every object the operator reads comes from here (no API reads in a reconcile). The indexes
(platform/clients/informer.py's, as client-go's indexers) answer the questions reconciles and handlers
ask: which Userlands use a Template (`BY_TEMPLATE`), which Userlands give one student one
Template, and that pair's Pods (`BY_PAIR`). Handlers only enqueue keys:

- a Userland's change (not its status: our own writes) -> that Userland; a change of the
  Template or student it names -> both Templates' status (debounced) and the pair's other
  Userlands (a duplicate may now be the only one);
- a Template's change -> it, every Userland of it, and every Template whose route it takes
  or frees;
- a Deployment's or Service's change -> its controller owner (a Userland); a PVC's or Pod's
  -> the Userlands of its labels' pair; a NetworkPolicy's -> its Template.
- capacity (operator/capacity.py): an image puller's (DaemonSet) or the placeholders'
  (Deployment) change -> their Template; a Userland's status change -> its Template, when that
  has a schedule (its `LectureReady` counts the environments; debounced), the operator's own
  status writes included (the informer's `own_writes`: the watch reports those as no change).
- Assignments (operator/assignments.py): an Assignment's change (not its status) -> it; a
  worker Pod's -> its Assignment; a student's environment appearing or going, its volume, or its
  Pod moving to another node -> the Assignments of that Template (`BY_ASSIGNMENT_TEMPLATE`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from userland.operator.rules.progress import trim_pod
from userland.operator.rules.route_conflicts import RouteConflicts
from userland.operator.workqueue import WorkQueue
from userland.platform.clients.informer import Informer, drop_managed_fields
from userland.platform.clients.kube import (
    ASSIGNMENTS,
    DAEMONSETS,
    DEPLOYMENTS,
    JSON,
    NETWORK_POLICIES,
    PODS,
    PVCS,
    SERVICES,
    TEMPLATES,
    USERLANDS,
    KubeClient,
)
from userland.platform.model import naming
from userland.platform.model.models import InvalidSpec, UserlandSpec
from userland.platform.model.objects import labels_of, meta

USERLAND = "Userland"
TEMPLATE = "Template"
ASSIGNMENT = "Assignment"
Key = tuple[str, str, str]  # (kind, namespace, name)
BY_TEMPLATE = "template"  # (namespace, template) -> Userlands
BY_PAIR = "pair"  # (namespace, template, user) -> Userlands, or Pods
BY_ASSIGNMENT_TEMPLATE = "assignment-template"  # (namespace, template) -> Assignments
BY_ASSIGNMENT = "assignment"  # (namespace, assignment) -> its worker Pods
BY_CAPACITY = "capacity"  # (namespace, template) -> its image pullers
# Template status (how many Userlands use it) is written at most this often per Template.
TEMPLATE_STATUS_DEBOUNCE = 1.0


def userland_spec(obj: JSON | None) -> UserlandSpec | None:
    if obj is None:
        return None
    try:
        return UserlandSpec.parse(obj.get("spec"))
    except InvalidSpec:
        return None


def by_template(obj: JSON) -> list[Hashable]:
    spec = userland_spec(obj)
    return [] if spec is None else [(meta(obj).get("namespace", ""), spec.template)]


def by_pair(obj: JSON) -> list[Hashable]:
    spec = userland_spec(obj)
    return [] if spec is None else [(meta(obj).get("namespace", ""), spec.template, spec.user)]


def labelled_pair(obj: JSON) -> tuple[str, str, str]:
    """The (namespace, template, user) a child's labels name (PVCs and Pods are found so)."""
    found = labels_of(obj)
    return (meta(obj).get("namespace", ""), found.get(naming.LABEL_TEMPLATE, ""),
            found.get(naming.LABEL_USER, ""))


def controller_owner(obj: JSON) -> JSON | None:
    return next((ref for ref in meta(obj).get("ownerReferences") or [] if ref.get("controller")), None)


def without_status(obj: JSON | None) -> Any:
    """What a watch event changed besides status (our own status writes need no reconcile)."""
    if obj is None:
        return None
    kept = {k: v for k, v in meta(obj).items() if k not in ("resourceVersion", "managedFields")}
    return (kept, obj.get("spec"))


def by_assignment_template(obj: JSON) -> list[Hashable]:
    templates = (obj.get("spec") or {}).get("templates")
    namespace = meta(obj).get("namespace", "")
    return [(namespace, t) for t in templates if isinstance(t, str)] if isinstance(templates, list) else []


def worker_of(obj: JSON) -> list[Hashable]:
    name = labels_of(obj).get(naming.LABEL_ASSIGNMENT)
    return [(meta(obj).get("namespace", ""), name)] if name else []


def capacity_of(obj: JSON) -> list[Hashable]:
    template = labels_of(obj).get(naming.LABEL_CAPACITY_FOR)
    return [(meta(obj).get("namespace", ""), template)] if template else []


def node_of(pod: JSON | None) -> str | None:
    return ((pod or {}).get("spec") or {}).get("nodeName") if pod is not None else None


def trim_deployment(obj: JSON) -> JSON:
    """Keep what reconcile reads: metadata, spec, and the replica counts of status."""
    drop_managed_fields(obj)
    status = obj.get("status") or {}
    obj["status"] = {
        k: status[k]
        for k in ("availableReplicas", "readyReplicas", "replicas", "observedGeneration", "conditions")
        if k in status
    }
    return obj


class Caches:
    """The informers of what the operator reads, with their indexes and handlers."""

    def __init__(self, client: KubeClient, namespaces: tuple[str, ...], queue: WorkQueue[Key],
                 route_conflicts: RouteConflicts) -> None:
        self.queue = queue
        self.route_conflicts = route_conflicts
        managed = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
        self.templates = Informer(client, TEMPLATES, namespaces)
        # Thousands of these: kept as compact JSON text (see Informer).
        self.userlands = Informer(client, USERLANDS, namespaces, compact=True)
        self.deployments = Informer(client, DEPLOYMENTS, namespaces, label_selector=managed,
                                    transform=trim_deployment, compact=True)
        self.services = Informer(client, SERVICES, namespaces, label_selector=managed, compact=True)
        self.pvcs = Informer(client, PVCS, namespaces, label_selector=managed, compact=True)
        self.network_policies = Informer(client, NETWORK_POLICIES, namespaces, label_selector=managed)
        # Students' Pods, trimmed to what status needs (progress, a final reason, its age).
        self.pods = Informer(client, PODS, namespaces, label_selector=managed, transform=trim_pod)
        # Dozens per course, each with a status of one entry per student: kept compact.
        self.assignments = Informer(client, ASSIGNMENTS, namespaces, compact=True)
        # The Templates' image pullers (operator/capacity.py): one or two per Template in use.
        self.daemonsets = Informer(client, DAEMONSETS, namespaces, label_selector=managed,
                                   transform=drop_managed_fields)
        self.all = (self.templates, self.userlands, self.deployments, self.services, self.pvcs,
                    self.network_policies, self.pods, self.assignments, self.daemonsets)
        self.daemonsets.add_index(BY_CAPACITY, capacity_of)
        self.daemonsets.add_handler(self._on_owned_child)
        self.assignments.add_index(BY_ASSIGNMENT_TEMPLATE, by_assignment_template)
        self.pods.add_index(BY_ASSIGNMENT, worker_of)
        self.assignments.add_handler(self._on_assignment)
        self.userlands.add_index(BY_TEMPLATE, by_template)
        self.userlands.add_index(BY_PAIR, by_pair)
        self.pods.add_index(BY_PAIR, lambda pod: [labelled_pair(pod)])
        self.templates.add_handler(self._on_template)
        self.userlands.add_handler(self._on_userland)
        self.userlands.add_handler(self._on_userland_status, own_writes=True)
        self.deployments.add_handler(self._on_owned_child)
        self.services.add_handler(self._on_owned_child)
        self.pvcs.add_handler(self._on_labelled_child)
        self.pods.add_handler(self._on_labelled_child)
        self.network_policies.add_handler(self._on_network_policy)

    # ----- questions reconciles ask -----

    def userlands_of_template(self, namespace: str, template: str) -> list[str]:
        return [name for _, name in self.userlands.index_keys(BY_TEMPLATE, (namespace, template))]

    def userlands_of_pair(self, namespace: str, template: str, user: str) -> list[JSON]:
        return self.userlands.by_index(BY_PAIR, (namespace, template, user))

    def pods_of_pair(self, namespace: str, template: str, user: str) -> list[JSON]:
        return self.pods.by_index(BY_PAIR, (namespace, template, user))

    def assignments_of_template(self, namespace: str, template: str) -> list[str]:
        keys = self.assignments.index_keys(BY_ASSIGNMENT_TEMPLATE, (namespace, template))
        return [name for _, name in keys]

    def workers_of(self, namespace: str, assignment: str) -> list[JSON]:
        return self.pods.by_index(BY_ASSIGNMENT, (namespace, assignment))

    def _assignments_of(self, namespace: str, template: str) -> None:
        for name in self.assignments_of_template(namespace, template):
            self.queue.add((ASSIGNMENT, namespace, name))

    # ----- handlers: they only enqueue keys -----

    def _on_userland(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        ns, name = meta(obj).get("namespace", ""), meta(obj).get("name", "")
        before, after = self.userlands.index_values(BY_PAIR, old), self.userlands.index_values(BY_PAIR, new)
        if before != after:
            for pair in before | after:
                assert isinstance(pair, tuple)
                self.queue.add_after((TEMPLATE, ns, pair[1]), TEMPLATE_STATUS_DEBOUNCE)
            for pair in before - after:
                # A duplicate of this pair may now be the only one: let it proceed.
                for _, other in self.userlands.index_keys(BY_PAIR, pair):
                    self.queue.add((USERLAND, ns, other))
        if old is not None and new is not None and without_status(old) == without_status(new):
            return  # a status write (usually ours): nothing to reconcile (_on_userland_status)
        self.queue.add((USERLAND, ns, name))
        for pair in before | after:  # a student who receives assignments appeared, moved or went
            assert isinstance(pair, tuple)
            self._assignments_of(ns, pair[1])

    def _on_userland_status(self, old: JSON | None, new: JSON | None) -> None:
        """A Userland's status changed (an environment started, found a node, went to sleep): a
        scheduled Template counts its environments' room (`LectureReady`, its placeholders).
        Called for the operator's own status writes too (`own_writes`): the watch reports those
        as no change, as the cache already holds them, and they are nearly all of them."""
        if old is None or new is None or (old.get("status") or {}) == (new.get("status") or {}):
            return
        ns = meta(new).get("namespace", "")
        for pair in self.userlands.index_values(BY_PAIR, old) | self.userlands.index_values(BY_PAIR, new):
            assert isinstance(pair, tuple)
            if ((self.templates.get(ns, pair[1]) or {}).get("spec") or {}).get("schedule"):
                self.queue.add_after((TEMPLATE, ns, pair[1]), TEMPLATE_STATUS_DEBOUNCE)

    def _on_template(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        if old is not None and new is not None and without_status(old) == without_status(new):
            return
        ns, name = meta(obj).get("namespace", ""), meta(obj).get("name", "")
        # A route taken or freed changes other Templates' verdicts too (in any namespace).
        changed = self.route_conflicts.recompute(self.templates.items())
        for template_ns, template in {(ns, name)} | changed:
            self.queue.add((TEMPLATE, template_ns, template))
            for userland in self.userlands_of_template(template_ns, template):
                self.queue.add((USERLAND, template_ns, userland))
        self._assignments_of(ns, name)

    def _on_owned_child(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        owner = controller_owner(obj)
        if owner is not None and owner.get("kind") == USERLAND:
            self.queue.add((USERLAND, meta(obj).get("namespace", ""), str(owner.get("name"))))
        elif owner is not None and owner.get("kind") == TEMPLATE:  # an image puller, placeholders
            self.queue.add((TEMPLATE, meta(obj).get("namespace", ""), str(owner.get("name"))))

    def _on_labelled_child(self, old: JSON | None, new: JSON | None) -> None:
        """A child found by its labels (a PVC, a Pod): reconcile the Userlands of its pair; a
        worker Pod's: its Assignment; a volume appearing or going, or an environment's Pod
        appearing, going or on another node: the Assignments of its Template."""
        obj = new or old
        assert obj is not None
        if (assignment := labels_of(obj).get(naming.LABEL_ASSIGNMENT)):
            self.queue.add((ASSIGNMENT, meta(obj).get("namespace", ""), assignment))
            return
        namespace, template, user = labelled_pair(obj)
        for _, name in self.userlands.index_keys(BY_PAIR, (namespace, template, user)):
            self.queue.add((USERLAND, namespace, name))
        if old is None or new is None or node_of(old) != node_of(new):
            self._assignments_of(namespace, template)

    def _on_assignment(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        if old is not None and new is not None and without_status(old) == without_status(new):
            return  # our own status write
        self.queue.add((ASSIGNMENT, meta(obj).get("namespace", ""), meta(obj).get("name", "")))

    def _on_network_policy(self, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        owner = controller_owner(obj)
        if owner is not None and owner.get("kind") == TEMPLATE:
            self.queue.add((TEMPLATE, meta(obj).get("namespace", ""), str(owner.get("name"))))
