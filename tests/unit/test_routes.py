"""Which Template keeps a contested route (platform/model/routes.py): one rule for operator and gateway."""

from __future__ import annotations

import itertools

import pytest

from userland.platform.model.routes import (
    PLATFORM,
    Collision,
    RouteClaim,
    conflict_message,
    platform_host_of,
    route_collisions,
    routed_out,
)

T1, T2, T3 = "2026-11-20T09:00:00Z", "2026-11-21T09:00:00Z", "2026-11-22T09:00:00Z"


def host(ns: str, name: str, created: str, host: str, prefix: str | None = None) -> RouteClaim:
    return RouteClaim(ns, name, created, host, prefix)


def prefix(ns: str, name: str, created: str, prefix: str) -> RouteClaim:
    return RouteClaim(ns, name, created, None, prefix)


def test_the_older_template_keeps_a_host_whatever_the_order_and_names() -> None:
    older = host("zz-course", "zz-ide", T1, "ide.example.edu")
    newer = host("aa-course", "aa-ide", T2, "ide.example.edu")
    for order in ([older, newer], [newer, older]):
        found = route_collisions(order)
        assert found == {
            "zz-course/zz-ide": (Collision("host ide.example.edu", "aa-course/aa-ide", kept=True),),
            "aa-course/aa-ide": (Collision("host ide.example.edu", "zz-course/zz-ide", kept=False),),
        }
        assert routed_out(found) == {"aa-course/aa-ide"}


def test_same_second_is_decided_by_namespace_then_name() -> None:
    a = host("a", "ide", T1, "ide.example.edu")
    b = host("b", "ide", T1, "ide.example.edu")
    assert routed_out(route_collisions([b, a])) == {"b/ide"}


@pytest.mark.parametrize(("first", "second", "collide"), [
    (prefix("c", "x", T1, "/ide/"), prefix("c", "y", T2, "/ide/"), True),
    (prefix("c", "x", T1, "/ide"), prefix("c", "y", T2, "/ide/"), True),  # one prefix
    (prefix("c", "x", T1, "/ide/"), prefix("c", "y", T2, "/ide/gpu/"), False),  # longest wins
    (host("c", "x", T1, "a.edu", "/sql/"), host("d", "y", T2, "a.edu", "/sql"), True),
    (host("c", "x", T1, "a.edu", "/sql/"), host("d", "y", T2, "a.edu"), False),  # most specific
    (host("c", "x", T1, "a.edu", "/sql/"), prefix("d", "y", T2, "/sql/"), False),
    (host("c", "x", T1, "a.edu"), host("d", "y", T2, "b.edu"), False),
    # bob's own origin under ide.example.edu:
    (host("c", "x", T1, "ide.example.edu"), host("d", "y", T2, "bob.ide.example.edu"), True),
    (host("c", "x", T1, "ide.example.edu"), host("d", "y", T2, "a.b.ide.example.edu"), False),
    (host("c", "x", T1, "ide.example.edu"), host("d", "y", T2, "-x.ide.example.edu"), False),
])
def test_what_collides(first: RouteClaim, second: RouteClaim, collide: bool) -> None:
    for order in itertools.permutations([first, second]):
        assert routed_out(route_collisions(order)) == ({second.key} if collide else set())


def test_a_student_host_under_an_older_host_names_the_student() -> None:
    found = route_collisions([host("d", "y", T1, "bob.ide.example.edu"),
                              host("c", "x", T2, "ide.example.edu")])
    # The older one keeps it, even the narrower: the newer is not routed at all.
    assert routed_out(found) == {"c/x"}
    assert "student bob" in found["c/x"][0].route and found["c/x"][0].other == "d/y"
    assert found["d/y"][0].kept and found["d/y"][0].other == "c/x"


def test_three_on_one_host() -> None:
    found = route_collisions([host("c", "b", T2, "ide.x"), host("c", "a", T1, "ide.x"),
                              host("c", "c", T3, "ide.x")])
    assert [c.other for c in found["c/a"]] == ["c/b", "c/c"] and all(c.kept for c in found["c/a"])
    assert routed_out(found) == {"c/b", "c/c"}
    assert [c.other for c in found["c/c"]] == ["c/a"]


@pytest.mark.parametrize("claim", [
    host("c", "x", T1, "userland.example.edu"),  # the platform's own host
    host("c", "x", T1, "userland.example.edu", "/ide/"),
    prefix("c", "x", T1, "/auth/"),  # sign-in
    prefix("c", "x", T1, "/auth/x/"),
    host("c", "x", T1, "ide.example.edu", "/__userland/"),  # the gateway's own paths
])
def test_routes_the_platform_answers_itself_are_never_a_templates(claim: RouteClaim) -> None:
    found = route_collisions([claim], "userland.example.edu")
    assert found["c/x"] == (Collision(claim.describe(), PLATFORM, kept=False),)
    assert "platform's own address" in conflict_message(found["c/x"])


def test_messages_name_the_other_template_on_both_sides() -> None:
    found = route_collisions([host("one", "ide", T1, "ide.x"), host("two", "ide", T2, "ide.x")])
    kept, lost = conflict_message(found["one/ide"]), conflict_message(found["two/ide"])
    assert "two/ide" in kept and "keeps it" in kept and "host ide.x" in kept
    assert "one/ide" in lost and "does not route this Template" in lost


def test_claims_from_objects_and_the_platform_host() -> None:
    obj = {"metadata": {"name": "ide", "namespace": "c", "creationTimestamp": T1},
           "spec": {"routing": {"host": "IDE.example.edu", "pathPrefix": "/x"}, "port": 80,
                    "podSpec": {"containers": [{"name": "a", "image": "b"}]}}}
    assert RouteClaim.from_object(obj) == RouteClaim("c", "ide", T1, "ide.example.edu", "/x/")
    assert RouteClaim.from_object({"metadata": {"name": "Bad_Name"}, "spec": {}}) is None
    assert platform_host_of("https://Userland.Example.edu:8443/") == "userland.example.edu"
    assert platform_host_of("") is None
