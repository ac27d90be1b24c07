"""The informer's indexes and its read-your-writes rule, fed events directly (no server: the
same methods a watch and a relist call; tests/integration/test_informer.py runs them live)."""

from __future__ import annotations

from typing import Any

from userland.platform.clients.informer import Informer
from userland.platform.clients.kube import KubeClient, Resource

THINGS = Resource("", "v1", "configmaps", "ConfigMap")


def thing(name: str, owner: str, version: int, namespace: str = "a") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(version)},
            "data": {"owner": owner}}


def informer(compact: bool = False) -> Informer:
    cache = Informer(KubeClient.__new__(KubeClient), THINGS, ["a"], compact=compact)
    cache.add_index("owner", lambda obj: [(obj["metadata"]["namespace"], obj["data"]["owner"])])
    return cache


def names(cache: Informer, owner: str) -> list[str]:
    return [obj["metadata"]["name"] for obj in cache.by_index("owner", ("a", owner))]


def test_indexes_follow_adds_changes_deletes_and_relists() -> None:
    for compact in (False, True):
        cache = informer(compact)
        cache._apply("ADDED", thing("x", "ann", 1))
        cache._apply("ADDED", thing("y", "ann", 2))
        assert names(cache, "ann") == ["x", "y"]
        cache._apply("MODIFIED", thing("y", "bob", 3))
        assert names(cache, "ann") == ["x"] and names(cache, "bob") == ["y"]
        cache._apply("DELETED", thing("x", "ann", 4))
        assert names(cache, "ann") == [] and ("a", "ann") not in cache._indices["owner"]
        cache._replace("a", [thing("z", "bob", 5)])  # a relist: y went while the watch was down
        assert names(cache, "bob") == ["z"]
        assert cache.index_keys("owner", ("a", "bob")) == [("a", "z")]


def test_handlers_find_the_new_values_already_indexed() -> None:
    cache = informer()
    seen: list[list[str]] = []
    cache.add_handler(lambda old, new: seen.append(names(cache, "ann")))
    cache._apply("ADDED", thing("x", "ann", 1))
    cache._apply("MODIFIED", thing("x", "bob", 2))
    assert seen == [["x"], []]
    assert cache.index_values("owner", thing("q", "cy", 9)) == frozenset({("a", "cy")})
    assert cache.index_values("owner", None) == frozenset()


def test_an_index_added_late_covers_what_is_stored() -> None:
    cache = Informer(KubeClient.__new__(KubeClient), THINGS, ["a"])
    cache._apply("ADDED", thing("x", "ann", 1))
    cache.add_index("owner", lambda obj: [obj["data"]["owner"]])
    assert [o["metadata"]["name"] for o in cache.by_index("owner", "ann")] == ["x"]


def test_a_write_older_than_the_cache_is_not_stored_a_newer_one_is() -> None:
    cache = informer()
    cache._apply("ADDED", thing("x", "ann", 10))
    assert cache.put(thing("x", "bob", 9)) is False and cache.stale_puts == 1
    assert names(cache, "ann") == ["x"]
    assert cache.put(thing("x", "bob", 11)) is True
    assert names(cache, "bob") == ["x"]
    cache._apply("DELETED", thing("x", "bob", 12))
    assert cache.put(thing("x", "bob", 11)) is False  # the watch said it is gone
    assert cache.get("a", "x") is None
    assert cache.put(thing("x", "cy", 13)) is True  # made again since: a newer version
    # Versions that are not etcd revisions are not compared: the write is stored as before.
    cache.put({"metadata": {"name": "w", "namespace": "a", "resourceVersion": "abc"}, "data": {"owner": "d"}})
    assert names(cache, "d") == ["w"]


def test_indexed_values_are_the_values_with_members() -> None:
    cache = informer()
    cache._apply("ADDED", thing("x", "ann", 1))
    cache._apply("ADDED", thing("y", "bob", 2))
    assert sorted(cache.indexed_values("owner")) == [("a", "ann"), ("a", "bob")]  # type: ignore[type-var]
    cache._apply("DELETED", thing("x", "ann", 3))
    assert cache.indexed_values("owner") == [("a", "bob")]
