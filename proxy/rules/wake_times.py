"""How long waking a Template's environments has taken lately, as this gateway saw it, and the
words the waking page says with it ("Waking VS Code took 8 to 11 seconds the last 5 times").

The gateway watches every Userland (proxy/routes_cache.py): a Userland that leaves Idle starts a
wake; the same one turning Ready ends it. The last `KEEP` wakes per (course, Template) are kept
in memory (a replica that just started knows none: the page then says the typical figure
measured with `make run`, README "Sleep and wake"). The operator's histogram
`userland_environment_wake_seconds` is the fleet-wide figure; this is what one page can say
without a query.
"""

from __future__ import annotations

import statistics
from collections import deque

KEEP = 20
# Fewer wakes than this seen here: the typical figure instead (one slow wake says little).
ENOUGH = 3
# Measured wake to a usable app with `make run` (issue 24: 8 to 11 s for JupyterLab and VS Code).
TYPICAL = "Waking up usually takes about 10 seconds, longer when many start at once."

Key = tuple[str, str]  # (namespace, template)


class WakeTimes:
    def __init__(self) -> None:
        self._since: dict[tuple[str, str], tuple[Key, float]] = {}  # (namespace, name) -> wake start
        self._took: dict[Key, deque[float]] = {}

    def seen(self, namespace: str, name: str, template: str, *, was_idle: bool, idle: bool, ready: bool,
             now: float) -> None:
        """A Userland's change: asleep before (`was_idle`), and now asleep or Ready."""
        key = (namespace, name)
        if was_idle and not idle and not ready:
            self._since[key] = ((namespace, template), now)
        elif ready and key in self._since:
            which, began = self._since.pop(key)
            self._took.setdefault(which, deque(maxlen=KEEP)).append(max(0.0, now - began))
        elif idle:
            self._since.pop(key, None)  # asleep again before it woke: nothing to time

    def forget(self, namespace: str, name: str) -> None:
        self._since.pop((namespace, name), None)

    def recent(self, namespace: str, template: str) -> tuple[float, ...]:
        return tuple(self._took.get((namespace, template), ()))


def wake_words(took: tuple[float, ...], template_name: str) -> str:
    """What the waking page says about how long it takes, from the recent wakes (seconds)."""
    if len(took) < ENOUGH:
        return TYPICAL
    low, high = round(min(took)), round(max(took))
    typical = round(statistics.median(took))
    span = f"{low} seconds" if low == high else f"{low} to {high} seconds"
    return (f"Waking {template_name} up took {span} the last {len(took)} times (usually about "
            f"{typical} seconds); longer when many start at once.")
