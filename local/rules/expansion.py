"""Kubernetes' `$(VAR)` expansion, as the kubelet applies it to a container's command, args and
env values (k8s.io/kubernetes third_party/forked/golang/expansion):

- `$(NAME)` becomes the value of NAME when NAME is defined, and stays as written otherwise;
- `$$` becomes a single `$`, so `$$(NAME)` is the literal text `$(NAME)`;
- a `$` followed by anything else, and an unterminated `$(`, are kept as they are (the text
  after an unterminated `$(` is read on, so a `$$` there still becomes `$`).

Env values are expanded in order, each seeing only the variables defined before it (the
kubelet's rule), so `B=$(A)` works after `A` but not before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

Lookup = Callable[[str], str | None]


def expand(text: str, lookup: Lookup | Mapping[str, str]) -> str:
    """`text` with every defined `$(VAR)` replaced, by the kubelet's rules."""
    get: Lookup = lookup.get if isinstance(lookup, Mapping) else lookup
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char != "$" or i + 1 >= n:
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":  # an escaped dollar
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end == -1:  # unterminated: "$(" kept, the rest read on as usual
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : end]
            value = get(name) if name else None
            out.append(value if value is not None else text[i : end + 1])
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def expand_env(pairs: Iterable[tuple[str, str]], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The container's environment: each value expanded against `base` and the earlier pairs.
    A later duplicate name replaces the earlier value (as in a Pod)."""
    env: dict[str, str] = {}
    context = dict(base or {})
    for name, value in pairs:
        expanded = expand(value, context)
        env[name] = expanded
        context[name] = expanded
    return env
