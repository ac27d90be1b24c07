"""A CourseRequest (deploy/crds/courserequests.userland.dev.yaml): an admin's new course, linked to
an LMS course, and the objects that make it.

Pure: parsing (with the reasons an admin can act on), the course's objects as deploy/course/
describes them (a golden test, tests/unit/test_course_request.py, renders deploy/course/ with
kubectl kustomize and compares: one shape, two writers), and the Ready condition's words. The
operator (operator/course_requests.py) does the reads and writes; the web UI
(web/lti_new_course.py) makes the request.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from userland.platform.model import naming
from userland.platform.model.lti_links import (
    ANNOTATION_LINKS,
    ANNOTATION_LTI_INSTRUCTORS,
    LmsLink,
    links_value,
)

JSON = dict[str, Any]
KIND = "CourseRequest"
PART_OF = {"app.kubernetes.io/part-of": "userland"}
WEB_ROLE = "userland-web"  # the ClusterRole a course's RoleBinding gives the web UI (deploy/rbac/web.yaml)
WEB_SERVICE_ACCOUNT = "userland-web"
TITLE_MAX = 200


class InvalidRequest(ValueError):
    """What is wrong with a request, in words an admin can act on."""


@dataclass(frozen=True)
class CourseRequest:
    course: str  # the new namespace's name
    title: str
    template_namespace: str
    template_name: str
    link: LmsLink
    requested_by: str

    @classmethod
    def parse(cls, spec: object) -> CourseRequest:
        if not isinstance(spec, dict):
            raise InvalidRequest("The request has no spec.")
        course = spec.get("course")
        problem = course_name_problem(course)
        if problem:
            raise InvalidRequest(problem)
        assert isinstance(course, str)
        title = spec.get("title")
        if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX:
            raise InvalidRequest(f"The course needs a title of 1 to {TITLE_MAX} characters.")
        template = spec.get("template") or {}
        link = spec.get("link") or {}
        if not isinstance(template, dict) or not all(
                isinstance(template.get(k), str) and template.get(k) for k in ("namespace", "name")):
            raise InvalidRequest("The request must name the Template to copy (namespace and name).")
        if not isinstance(link, dict) or not all(
                isinstance(link.get(k), str) and link.get(k) for k in ("registration", "context")):
            raise InvalidRequest("The request must name the LMS course to link (registration and context).")
        login = spec.get("requestedBy")
        if not isinstance(login, str) or not naming.is_valid_login(login):
            raise InvalidRequest("requestedBy must be the Userland login of the admin who asked.")
        strings = {k: str(link.get(k) or "") for k in ("title", "memberships", "lineitems")}
        return cls(course, title.strip(), template["namespace"], template["name"],
                   LmsLink(link["registration"], link["context"], template["name"], **strings), login)

    def spec(self) -> JSON:
        link = {k: v for k, v in asdict(self.link).items() if k != "template" and v}
        return {"course": self.course, "title": self.title,
                "template": {"namespace": self.template_namespace, "name": self.template_name},
                "link": link, "requestedBy": self.requested_by}


def course_name_problem(name: object) -> str:
    """Why `name` cannot be a course's name ("" if it can)."""
    if not isinstance(name, str) or not name:
        return "The course needs a name."
    if len(name) > naming.DNS_LABEL_MAX:
        return f"A course's name has at most {naming.DNS_LABEL_MAX} characters."
    if not naming.is_valid_dns_label(name):
        return ("A course's name may have only lower-case letters, digits and dashes, and must "
                "start and end with a letter or digit (for example databases-2026).")
    if name.startswith("kube-") or name in ("default", "kube-system", "kube-public"):
        return "That name is reserved by the cluster: choose another."
    return ""


def suggested_name(title: str) -> str:
    """A course name from an LMS course's title ("Databases 101 (2026)" -> databases-101-2026)."""
    name = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:naming.DNS_LABEL_MAX].strip("-")
    return name if name and not course_name_problem(name) else "course"


def request_body(name: str, request: CourseRequest) -> JSON:
    return {"apiVersion": naming.API_VERSION, "kind": KIND,
            "metadata": {"name": name, "labels": dict(PART_OF)}, "spec": request.spec()}


def marker(request_namespace: str, request_name: str) -> str:
    return f"{request_namespace}/{request_name}"


def is_ours(namespace: JSON, mark: str) -> bool:
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(naming.ANNOTATION_COURSE_REQUEST) == mark)


# ----- the course's objects (deploy/course/'s shapes) -----

def course_namespace(request: CourseRequest, mark: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": request.course,
        "labels": {**PART_OF, naming.LABEL_COURSE: "true"},
        "annotations": {
            naming.ANNOTATION_COURSE_TITLE: request.title,
            naming.ANNOTATION_INSTRUCTORS: request.requested_by,
            naming.ANNOTATION_ASSISTANTS: "",
            ANNOTATION_LTI_INSTRUCTORS: request.requested_by,
            ANNOTATION_LINKS: links_value([request.link]),
            naming.ANNOTATION_COURSE_REQUEST: mark,
        }}}


def web_role_binding(course: str, web_namespace: str) -> JSON:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": WEB_ROLE, "namespace": course, "labels": dict(PART_OF)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WEB_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": WEB_SERVICE_ACCOUNT, "namespace": web_namespace}]}


def network_policies(course: str) -> list[JSON]:
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny-ingress", "namespace": course, "labels": dict(PART_OF)},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    workers = [naming.WORKER_COMPONENT, naming.GRADER_COMPONENT]
    egress = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "userland-environments-egress", "namespace": course,
                           "labels": dict(PART_OF)},
              "spec": {"podSelector": {
                  "matchLabels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
                  "matchExpressions": [{"key": naming.LABEL_COMPONENT, "operator": "NotIn",
                                        "values": workers}]},
                  "policyTypes": ["Egress"],
                  "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
                                     {"namespaceSelector": {}}]}]}}
    return [deny, egress]


def template_copy(source: JSON, course: str) -> JSON:
    """The chosen Template, in the new course: its name, labels and spec (not the old course's
    annotations, such as its LMS contexts, nor its status)."""
    found = source.get("metadata") or {}
    metadata: JSON = {"name": str(found.get("name") or ""), "namespace": course}
    if found.get("labels"):
        metadata["labels"] = dict(found["labels"])
    return {"apiVersion": naming.API_VERSION, "kind": "Template", "metadata": metadata,
            "spec": source.get("spec") or {}}


def course_objects(request: CourseRequest, mark: str, web_namespace: str,
                   source_template: JSON) -> list[JSON]:
    """Everything the course is, in the order it is made (the namespace first)."""
    return [course_namespace(request, mark), web_role_binding(request.course, web_namespace),
            *network_policies(request.course), template_copy(source_template, request.course)]


# ----- the Ready condition -----

@dataclass(frozen=True)
class Outcome:
    ready: bool
    reason: str
    message: str
    address: str = ""


def invalid(problem: str) -> Outcome:
    return Outcome(False, "Invalid", problem + " Delete this request and make a new one.")


def name_taken(course: str) -> Outcome:
    return Outcome(False, "NameTaken", f"The name {course!r} is taken by a namespace this request did not "
                   "make; it is left untouched. Delete this request and make one with another name.")


def template_missing(request: CourseRequest) -> Outcome:
    return Outcome(False, "TemplateNotFound", f"The Template {request.template_name!r} in "
                   f"{request.template_namespace!r} was not found: make it there (or delete this request "
                   "and choose another one); the course is made once it exists.")


def being_deleted(course: str) -> Outcome:
    return Outcome(False, "NamespaceTerminating", f"The namespace {course!r} is being deleted; the "
                   "course is made again once it is gone.")


def done(request: CourseRequest, public_url: str) -> Outcome:
    address = f"{public_url.rstrip('/')}/courses/{request.course}"
    return Outcome(True, "Ready", f"The course {request.title!r} is ready at {address}, linked to the LMS "
                   f"course {request.link.title or request.link.context!r}.", address)


def status_of(outcome: Outcome, generation: int, now: str, old: JSON | None) -> JSON:
    """The status to write; the transition time moves only when Ready's status changes."""
    previous: JSON = next((c for c in (old or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
    status = "True" if outcome.ready else "False"
    since = previous.get("lastTransitionTime") if previous.get("status") == status else None
    condition = {"type": "Ready", "status": status, "reason": outcome.reason, "message": outcome.message,
                 "lastTransitionTime": since or now, "observedGeneration": generation}
    found: JSON = {"observedGeneration": generation, "conditions": [condition]}
    if outcome.address:
        found["address"] = outcome.address
    return found


def ready_of(obj: JSON) -> JSON:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})
