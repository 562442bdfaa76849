"""Following the leader of a ``--cluster`` (the Python side of the Rust SDK's
``FailoverTransport``).

A client or worker is given one server URL or several. Each request goes to
the URL that answered last. A ``503 NOT_LEADER`` answer naming the leader is
sent again to that URL at once (the URL is learned and kept); while no leader
is named (a takeover is under way), or a server refuses the connection or
cannot be reached, the other URLs are tried in turn, with a short backoff
between rounds, until a server answers or the failover window has passed.

A server that takes the connection but does not answer in time (paused,
hung) counts as one that cannot be reached, but only when more than one URL
is known: the request goes on to the next URL, and so does the next request
even when this one ran out of window. With a single URL, a refused
connection or a timeout is the answer, as before, and the caller's own
retries decide. A request sent again to another server may have been applied
by the first after all; every request the SDK sends again is safe to repeat
(creating calls carry an ``Idempotency-Key``, results their task's token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

#: How long one request keeps looking for a server that answers, in seconds.
DEFAULT_FAILOVER_WINDOW = 30.0
#: Most URLs learned from ``NOT_LEADER`` answers kept beside the configured ones.
MAX_LEARNED = 16
#: Redirects followed in a row before a pause (two nodes naming each other
#: while their views settle).
MAX_HOPS = 4
#: The pause between rounds over every URL: 0.1 s doubling up to 1 s.
ROUND_PAUSE = 0.1
ROUND_PAUSE_MAX = 1.0


def normalized(url: str) -> str:
    """``url`` without surrounding blanks or trailing slashes."""
    return url.strip().rstrip("/")


def split_urls(servers: str | Sequence[str]) -> list[str]:
    """The URLs of ``servers``: one URL, several comma-separated, or a list
    (whose items may hold commas too). Blank entries are dropped, repeats
    kept once."""
    items = [servers] if isinstance(servers, str) else list(servers)
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"a server URL must be a string, not {type(item).__name__}")
        for part in item.split(","):
            url = normalized(part)
            if url and url not in urls:
                urls.append(url)
    if not urls:
        raise ValueError("no server URL given")
    return urls


def _error_field(response: httpx.Response, name: str) -> Any:
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get(name) if isinstance(error, dict) else None


def is_not_leader(response: httpx.Response) -> bool:
    """Whether ``response`` is a standby's ``503 NOT_LEADER``."""
    return response.status_code == 503 and _error_field(response, "code") == "NOT_LEADER"


def leader_of(response: httpx.Response) -> str | None:
    """The ``leader`` URL of a ``NOT_LEADER`` answer, when it names one."""
    leader = _error_field(response, "leader")
    return leader if isinstance(leader, str) and leader.strip() else None


class Servers:
    """The URLs a client or worker speaks to, and which one is tried first."""

    def __init__(self, servers: str | Sequence[str], window: float) -> None:
        self._urls = split_urls(servers)
        self.configured = len(self._urls)
        self.current = 0
        self.window = max(0.0, float(window))
        self._lock = threading.Lock()

    @property
    def urls(self) -> list[str]:
        """The URLs known now: the configured ones, then those learned."""
        with self._lock:
            return list(self._urls)

    def __len__(self) -> int:
        return len(self._urls)

    def current_url(self) -> str:
        with self._lock:
            return self._urls[self.current]

    def pick(self, index: int) -> tuple[int, str]:
        with self._lock:
            i = index % len(self._urls)
            return i, self._urls[i]

    def index_of(self, url: str) -> int:
        """The index of ``url``, learning it if new."""
        url = normalized(url)
        with self._lock:
            if url in self._urls:
                return self._urls.index(url)
            if len(self._urls) >= self.configured + MAX_LEARNED:
                # Forget the oldest learned URL.
                del self._urls[self.configured]
                self.current = 0
            self._urls.append(url)
            return len(self._urls) - 1

    def move_to(self, url: str) -> None:
        """Makes ``url`` the one tried first (learning it if new)."""
        index = self.index_of(url)
        with self._lock:
            self.current = index

    def answered(self, index: int) -> None:
        with self._lock:
            self.current = index % len(self._urls)

    def passed_over(self, index: int) -> None:
        """``index`` did not answer: unless another server answered meanwhile,
        the next request starts at the one after it."""
        with self._lock:
            if self.current == index:
                self.current = (index + 1) % len(self._urls)

    def exchange(self, window: float | None = None) -> Exchange:
        """The state of one request's search for a server that answers."""
        return Exchange(self, self.window if window is None else window)


class ServerChoice:
    """The server properties of a client or worker that sends through
    ``self._servers``."""

    _servers: Servers

    @property
    def server(self) -> str:
        """The server the next request goes to first: the one that answered last."""
        return self._servers.current_url()

    @server.setter
    def server(self, url: str) -> None:
        self._servers.move_to(url)

    @property
    def servers(self) -> list[str]:
        """The server URLs known: those configured, then leaders learned from
        ``NOT_LEADER`` answers."""
        return self._servers.urls

    @property
    def failover_window(self) -> float:
        """How long one request keeps looking for a server that answers (seconds)."""
        return self._servers.window

    @failover_window.setter
    def failover_window(self, seconds: float) -> None:
        self._servers.window = max(0.0, float(seconds))


class Exchange:
    """One request over :class:`Servers`. The caller sends to :attr:`url`, then
    reports what came back with :meth:`answer` or :meth:`failed`: ``None``
    means that outcome is the request's outcome; a number means wait that
    many seconds, then send again to the new :attr:`url`."""

    def __init__(self, servers: Servers, window: float) -> None:
        self.servers = servers
        self.deadline = time.monotonic() + max(0.0, window)
        self.index, self.url = servers.pick(servers.current)
        self.tried = 0
        self.hops = 0
        self.rounds = 0
        self.clustered = False

    def answer(self, response: httpx.Response) -> float | None:
        if is_not_leader(response):
            self.clustered = True
            leader = leader_of(response)
            if leader is not None and normalized(leader) != self.url and self.hops < MAX_HOPS:
                self.hops += 1
                self.index, self.url = self.servers.pick(self.servers.index_of(leader))
                return 0.0
            return self._next()
        self.servers.answered(self.index)
        return None

    def failed(self, error: Exception) -> float | None:
        several = len(self.servers) > 1
        if (isinstance(error, httpx.TimeoutException) and several) or (
            isinstance(error, httpx.ConnectError) and (several or self.clustered)
        ):
            self.servers.passed_over(self.index)
            return self._next()
        self.servers.answered(self.index)
        return None

    def _next(self) -> float | None:
        now = time.monotonic()
        if now >= self.deadline:
            return None
        self.index, self.url = self.servers.pick(self.index + 1)
        self.tried += 1
        if self.tried < len(self.servers):
            return 0.0
        self.tried = 0
        self.hops = 0
        self.rounds += 1
        pause: float = min(ROUND_PAUSE * 2.0 ** (self.rounds - 1), ROUND_PAUSE_MAX)
        return min(pause, self.deadline - now)
