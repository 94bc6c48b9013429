"""An in-memory ZooKeeper for deterministic simulations: `FakeZooKeeper` (the ensemble) and `FakeZkClient` (one
session, implementing `broker_runtime.cluster.zk_client.ZkClient`).

It keeps ZooKeeper's semantics where the cluster code depends on them: znode versions and compare-and-set,
czxid (broker epochs), ephemeral znodes owned by a session, sequential names, atomic multi-ops, watches that fire
after the change, sessions that expire (their ephemerals vanish) and clients cut off from the ensemble (requests
wait, watches are re-armed and called on reconnection, as `KazooZkClient` does). Errors are kazoo's classes.

Everything runs on one asyncio loop. Requests yield a seeded random number of times before they apply, and
watch callbacks are delivered with `loop.call_soon`, so a seed fixes an interleaving: a failing seed replays.
`tests/integration/cluster/test_zk_client.py` runs the same conformance tests against this fake and a real
ZooKeeper.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)

from broker_runtime.cluster.zk_client import (
    CheckOp,
    CreateOp,
    DeleteOp,
    MultiError,
    Op,
    SessionState,
    SetOp,
    Stat,
    WatchKind,
)


@dataclass
class _Node:
    data: bytes
    czxid: int
    mzxid: int
    ephemeral_owner: int = 0
    version: int = 0
    children: set[str] = field(default_factory=set)
    sequence: int = 0

    def stat(self) -> Stat:
        return Stat(self.version, self.czxid, self.mzxid, self.ephemeral_owner, len(self.children))


def _parent(path: str) -> str:
    head, _, _ = path.rpartition("/")
    return head or "/"


def _name(path: str) -> str:
    return path.rpartition("/")[2]


class FakeZooKeeper:
    """The ensemble: one tree, sessions, and the watches of every client."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
        self.zxid = 0
        self._next_session = 0x1000
        self.clients: list[FakeZkClient] = []
        self.max_yields = 3
        #: called as fn(path, old data or None, new data or None) after every change of the tree
        self.observers: list[Callable[[str, bytes | None, bytes | None], None]] = []

    # -- sessions

    def new_session_id(self) -> int:
        self._next_session += 1
        return self._next_session

    def client(self, name: str = "") -> FakeZkClient:
        c = FakeZkClient(self, name)
        self.clients.append(c)
        return c

    def expire(self, client: FakeZkClient, *, renew: bool = True) -> None:
        """Expire a client's session: its ephemerals are deleted (firing watches), the client learns it and,
        with `renew`, connects again in a new session (as kazoo does by itself)."""
        self._drop_session(client.session_id)
        client._on_expired(renew)

    def _drop_session(self, session_id: int | None) -> None:
        for path in sorted(
            (p for p, n in self.nodes.items() if n.ephemeral_owner == session_id), reverse=True
        ):
            self._apply_delete(path)

    # -- tree (synchronous; callers have validated)

    def _tick(self) -> int:
        self.zxid += 1
        return self.zxid

    def _apply_create(self, path: str, data: bytes, owner: int, sequence: bool) -> str:
        parent = self.nodes[_parent(path)]
        if sequence:
            path = f"{path}{parent.sequence:010d}"
        parent.sequence += 1
        zxid = self._tick()
        self.nodes[path] = _Node(data, zxid, zxid, owner)
        parent.children.add(_name(path))
        self._observe(path, None, data)
        self._fire(path, WatchKind.DATA)
        self._fire(_parent(path), WatchKind.CHILDREN)
        return path

    def _apply_set(self, path: str, data: bytes) -> Stat:
        node = self.nodes[path]
        old, node.data = node.data, data
        node.version += 1
        node.mzxid = self._tick()
        self._observe(path, old, data)
        self._fire(path, WatchKind.DATA)
        return node.stat()

    def _apply_delete(self, path: str) -> None:
        old = self.nodes.pop(path).data
        self.nodes[_parent(path)].children.discard(_name(path))
        self._tick()
        self._observe(path, old, None)
        self._fire(path, WatchKind.DATA)
        self._fire(path, WatchKind.CHILDREN)
        self._fire(_parent(path), WatchKind.CHILDREN)

    def _observe(self, path: str, old: bytes | None, new: bytes | None) -> None:
        for fn in self.observers:
            fn(path, old, new)

    def _fire(self, path: str, kind: WatchKind) -> None:
        for client in self.clients:
            client._fire(path, kind)

    # -- validation (raises the error ZooKeeper would)

    def _check_create(
        self, path: str, sequence: bool, owner: int, ephemeral: bool, pending: set[str]
    ) -> None:
        parent = _parent(path)
        if parent not in self.nodes and parent not in pending:
            raise NoNodeError(path)
        if parent in self.nodes and self.nodes[parent].ephemeral_owner:
            raise NoChildrenForEphemeralsError(path)
        if not sequence and (path in self.nodes or path in pending):
            raise NodeExistsError(path)

    def _check_version(self, path: str, version: int) -> None:
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path)

    def _check_delete(
        self, path: str, version: int, pending: set[str] | None = None, gone: set[str] | None = None
    ) -> None:
        pending, gone = pending or set(), gone or set()
        if path in gone:
            raise NoNodeError(path)
        if path not in pending:
            self._check_version(path, version)
        children = (
            {c for c in self.nodes[path].children if f"{path}/{c}" not in gone}
            if path in self.nodes
            else set()
        )
        children |= {_name(p) for p in pending if _parent(p) == path}
        if children:
            raise NotEmptyError(path)

    # -- inspection for tests

    def data(self, path: str) -> bytes | None:
        node = self.nodes.get(path)
        return None if node is None else node.data

    def children(self, path: str) -> list[str]:
        node = self.nodes.get(path)
        return sorted(node.children) if node else []


class _FakeWatch:
    def __init__(
        self, client: FakeZkClient, path: str, kind: WatchKind, on_change: Callable[[], None]
    ) -> None:
        self.client = client
        self.path = path
        self.kind = kind
        self.on_change = on_change

    def cancel(self) -> None:
        self.client._watches.pop(self, None)


class FakeZkClient:
    """One session against a `FakeZooKeeper`; the `ZkClient` interface."""

    def __init__(self, server: FakeZooKeeper, name: str = "") -> None:
        self.server = server
        self.name = name
        self._session_id: int | None = None
        self._reachable = asyncio.Event()  # False while cut off from the ensemble
        self._watches: dict[_FakeWatch, None] = {}  # insertion order: deterministic delivery
        self._listeners: list[Callable[[SessionState], None]] = []
        self.closed = False
        self.expired = False

    # -- lifecycle

    async def start(self) -> None:
        self._session_id = self.server.new_session_id()
        self._reachable.set()

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._watches.clear()
            self.server._drop_session(self._session_id)
            self.server.clients.remove(self)

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def connected(self) -> bool:
        return self._reachable.is_set() and not self.expired

    # -- faults driven by the simulation

    def disconnect(self) -> None:
        """Cut this client off: requests wait, watch events are lost until `reconnect()`."""
        if self._reachable.is_set():
            self._reachable.clear()
            self._notify(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        if self._reachable.is_set() or self.closed:
            return
        if self.expired:  # it expired while we were away: we learn it only now, as a real client does
            self._reachable.set()
            self._notify(SessionState.EXPIRED)
            if self._renew_after_expiry:
                self.renew_session()
            return
        self._reachable.set()
        self._notify(SessionState.CONNECTED)
        self._call_all_watches()

    _renew_after_expiry = True

    def _on_expired(self, renew: bool) -> None:
        self.expired = True
        self._renew_after_expiry = renew
        if self._reachable.is_set():
            self._notify(SessionState.EXPIRED)
            if renew:
                asyncio.get_running_loop().call_soon(self.renew_session)

    def renew_session(self) -> None:
        """After an expiry: connect with a new session (what kazoo does by itself)."""
        self.expired = False
        self._session_id = self.server.new_session_id()
        self._reachable.set()
        self._notify(SessionState.NEW_SESSION)
        self._call_all_watches()

    def _notify(self, state: SessionState) -> None:
        loop = asyncio.get_running_loop()
        for fn in list(self._listeners):
            loop.call_soon(fn, state)

    def _call_all_watches(self) -> None:
        loop = asyncio.get_running_loop()
        for w in list(self._watches):
            loop.call_soon(self._deliver, w)

    def _deliver(self, w: _FakeWatch) -> None:
        if w in self._watches:
            w.on_change()

    def _fire(self, path: str, kind: WatchKind) -> None:
        if not self.connected or self.closed:
            return  # lost; the reconnection calls every watch
        loop = asyncio.get_running_loop()
        for w in list(self._watches):
            if w.path == path and w.kind is kind:
                loop.call_soon(self._deliver, w)

    def add_session_listener(self, fn: Callable[[SessionState], None]) -> None:
        self._listeners.append(fn)

    def watch(self, path: str, kind: WatchKind, on_change: Callable[[], None]) -> _FakeWatch:
        w = _FakeWatch(self, path, kind, on_change)
        self._watches[w] = None
        return w

    # -- requests

    async def _ready(self) -> None:
        """Wait as a request on the wire would; a request of a session that expires meanwhile fails."""
        if self.closed:
            raise SessionExpiredError("client closed")
        session = self._session_id
        for _ in range(self.server.rng.randint(0, self.server.max_yields)):
            await asyncio.sleep(0)
        await self._reachable.wait()
        if self.expired or self._session_id != session or self.closed:
            raise SessionExpiredError()

    async def get(self, path: str) -> tuple[bytes, Stat]:
        await self._ready()
        node = self.server.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, node.stat()

    async def exists(self, path: str) -> Stat | None:
        await self._ready()
        node = self.server.nodes.get(path)
        return None if node is None else node.stat()

    async def get_children(self, path: str) -> list[str]:
        await self._ready()
        node = self.server.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return sorted(node.children)

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
        makepath: bool = False,
    ) -> str:  # fmt: skip
        await self._ready()
        s = self.server
        if makepath:
            parts = _parent(path).strip("/").split("/")
            for i in range(1, len(parts) + 1):
                p = "/" + "/".join(parts[:i])
                if p != "/" and p not in s.nodes:
                    s._apply_create(p, b"", 0, False)
        owner = self._session_id if ephemeral else 0
        s._check_create(path, sequence, owner, ephemeral, set())
        return s._apply_create(path, data, owner or 0, sequence)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        await self._ready()
        self.server._check_version(path, version)
        return self.server._apply_set(path, data)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self._ready()
        s = self.server
        if recursive and path in s.nodes:
            for p in sorted((p for p in s.nodes if p.startswith(path.rstrip("/") + "/")), reverse=True):
                s._apply_delete(p)
        s._check_delete(path, version)
        s._apply_delete(path)

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        await self._ready()
        s = self.server
        pending: set[str] = set()  # created by an earlier operation of this multi
        gone: set[str] = set()  # deleted by one
        for index, op in enumerate(ops):
            try:
                if isinstance(op, CreateOp):
                    if op.path in gone:
                        gone.discard(op.path)
                    else:
                        s._check_create(op.path, op.sequence, 0, op.ephemeral, pending)
                    pending.add(op.path)
                elif isinstance(op, SetOp | CheckOp):
                    if op.path in gone:
                        raise NoNodeError(op.path)
                    if op.path not in pending:
                        s._check_version(op.path, op.version)
                elif isinstance(op, DeleteOp):
                    s._check_delete(op.path, op.version, pending, gone)
                    pending.discard(op.path)
                    gone.add(op.path)
            except Exception as exc:
                raise MultiError(index, exc) from None
        results: list[Any] = []
        for op in ops:
            if isinstance(op, CreateOp):
                owner = self._session_id if op.ephemeral else 0
                results.append(s._apply_create(op.path, op.data, owner or 0, op.sequence))
            elif isinstance(op, SetOp):
                results.append(s._apply_set(op.path, op.data))
            elif isinstance(op, DeleteOp):
                s._apply_delete(op.path)
                results.append(True)
            else:
                results.append(True)
        return results
