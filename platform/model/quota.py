"""Open things (WebSockets, live streams) per user in one process, capped: one student cannot
hold thousands of connections open and starve everyone else of the process's memory."""

from __future__ import annotations


class PerUserQuota:
    """How many each user (login) holds open; `limit` 0 means no limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, user: str) -> bool:
        """Take one for `user`; False (nothing taken) when they already hold `limit`."""
        count = self._open.get(user, 0)
        if self.limit and count >= self.limit:
            return False
        self._open[user] = count + 1
        return True

    def release(self, user: str) -> None:
        count = self._open.get(user, 0) - 1
        if count > 0:
            self._open[user] = count
        else:
            self._open.pop(user, None)
