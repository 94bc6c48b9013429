"""ZooKeeper for an asyncio program: the `ZkClient` interface and its kazoo implementation.

kazoo has no asyncio handler (python-zk/kazoo#499): its calls block, and its watch and session callbacks run
on kazoo's own threads. `KazooZkClient` therefore uses kazoo's `*_async` calls only and turns their results
into asyncio futures with `loop.call_soon_threadsafe`; the event loop never waits on ZooKeeper. Watch and session
callbacks are handed to the loop the same way, so that everything a consumer of this module sees runs on the
event loop.

Watches are persistent registrations (`watch(path, kind, on_change)`), as Kafka's ZooKeeperClient keeps its
handlers: ZooKeeper's one-shot watch is re-armed before `on_change` runs, and after any reconnection or new
session every registration is re-armed and called, because changes may have been missed while disconnected
(kazoo drops its watchers on every connection loss). `on_change` takes no argument: its job is to enqueue an
event whose processing reads the current state. Arming is asynchronous: register the watch, then read the state
(requests of one session are answered in order, so the read sees everything the watch will not report).

Requests that fail with a connection loss are retried once the connection is back (Kafka's
retryRequestsUntilConnected); a session expiry fails them with `SessionExpiredError`. Errors are kazoo's
exception classes (`NoNodeError`, `NodeExistsError`, `BadVersionError`, `NotEmptyError`, ...), which the test
double raises too.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType

log = logging.getLogger(__name__)


class SessionState(enum.Enum):
    CONNECTED = "connected"  # connected, same session as before (or the first one)
    SUSPENDED = "suspended"  # disconnected; the session may still be alive
    EXPIRED = "expired"  # the session is gone: its ephemeral znodes too
    NEW_SESSION = "new_session"  # connected again, in a new session after an expiry


class WatchKind(enum.Enum):
    DATA = "data"  # creation, deletion or data change of the znode
    CHILDREN = "children"  # children added or removed (or the znode created or deleted)


@dataclass(frozen=True)
class Stat:
    version: int
    czxid: int
    mzxid: int = 0
    ephemeral_owner: int = 0
    num_children: int = 0
    ctime: int = 0  # creation time, ms


@dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


Op = CreateOp | SetOp | DeleteOp | CheckOp


class MultiError(KazooException):
    """A multi-op failed as a whole; `index` is the operation that failed, `cause` its error."""

    def __init__(self, index: int, cause: Exception) -> None:
        super().__init__(f"operation {index} of a multi-op failed: {cause!r}")
        self.index = index
        self.cause = cause


class Watch(Protocol):
    def cancel(self) -> None: ...


class ZkClient(Protocol):
    """What the cluster code needs from ZooKeeper; every method runs on (and completes on) the event loop."""

    @property
    def session_id(self) -> int | None: ...
    @property
    def connected(self) -> bool: ...
    async def get(self, path: str) -> tuple[bytes, Stat]: ...
    async def exists(self, path: str) -> Stat | None: ...
    async def get_children(self, path: str) -> list[str]: ...
    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
        makepath: bool = False,
    ) -> str: ...  # fmt: skip
    async def set(self, path: str, data: bytes, version: int = -1) -> Stat: ...
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...
    async def multi(self, ops: Sequence[Op]) -> list[Any]: ...
    def watch(self, path: str, kind: WatchKind, on_change: Callable[[], None]) -> Watch: ...
    def add_session_listener(self, fn: Callable[[SessionState], None]) -> None: ...
    async def close(self) -> None: ...


# --- helpers over any ZkClient ------------------------------------------------------------------------------


async def get_or_none(zk: ZkClient, path: str) -> tuple[bytes, Stat] | None:
    try:
        return await zk.get(path)
    except NoNodeError:
        return None


async def children_or_empty(zk: ZkClient, path: str) -> list[str]:
    try:
        return await zk.get_children(path)
    except NoNodeError:
        return []


async def ensure_path(zk: ZkClient, path: str) -> None:
    if await zk.exists(path) is None:
        try:
            await zk.create(path, makepath=True)
        except NodeExistsError:
            pass


async def delete_if_exists(zk: ZkClient, path: str, version: int = -1, *, recursive: bool = False) -> bool:
    try:
        await zk.delete(path, version, recursive=recursive)
        return True
    except NoNodeError:
        return False


def split_connect(connect: str) -> tuple[str, str | None]:
    """`host:port,host:port/chroot` -> (hosts, "/chroot" or None)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else None
    return hosts, chroot


# --- kazoo ----------------------------------------------------------------------------------------------------


def _stat(s: Any) -> Stat:
    return Stat(s.version, s.czxid, s.mzxid, s.ephemeralOwner, s.numChildren, s.ctime)


class _KazooWatch:
    def __init__(
        self, client: KazooZkClient, path: str, kind: WatchKind, on_change: Callable[[], None]
    ) -> None:
        self.client = client
        self.path = path
        self.kind = kind
        self.on_change = on_change
        self.active = True
        self._armed = 0  # generation counter: a firing from an older arming is ignored

    def cancel(self) -> None:
        self.active = False
        self.client._watches.discard(self)

    def arm(self) -> None:
        """Set a one-shot ZooKeeper watch (loop thread). Failures are left to the next reconnection."""
        self._armed += 1
        generation = self._armed
        zk = self.client._zk

        def fired(event: Any) -> None:  # kazoo thread
            self.client._to_loop(self._fired, generation, event)

        if self.kind is WatchKind.DATA:
            zk.exists_async(self.path, watch=fired)
            return
        result = zk.get_children_async(self.path, watch=fired)

        def children_done(res: Any) -> None:  # kazoo thread
            if isinstance(res.exception, NoNodeError):
                # No node to watch children of: watch for its creation instead.
                zk.exists_async(self.path, watch=fired)

        result.rawlink(children_done)

    def _fired(self, generation: int, event: Any) -> None:
        if not self.active or generation != self._armed:
            return
        if event.type == EventType.NONE:
            return  # the connection dropped; re-armed and called on reconnection
        self.arm()
        self.client._call_handler(self.on_change)


class KazooZkClient:
    """One ZooKeeper session for one process. `await start()` connects (creating the chroot if needed)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int = 18000,
    ) -> None:
        self.connect_string = connect
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self._zk = KazooClient(
            hosts=self.hosts + (self.chroot or ""),
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1},
            command_retry=None,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watches: set[_KazooWatch] = set()
        self._listeners: list[Callable[[SessionState], None]] = []
        self._connected = asyncio.Event()
        self._session_id: int | None = None
        self._closing = False
        self._last_state: SessionState | None = None

    # -- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        timeout = self.connection_timeout_ms / 1000
        if self.chroot:
            await asyncio.to_thread(self._create_chroot, timeout)
        self._zk.add_listener(self._kazoo_state)
        await asyncio.to_thread(self._zk.start, timeout)
        self._session_id = self._zk.client_id[0]
        self._connected.set()
        log.info("connected to ZooKeeper %s, session 0x%x", self.connect_string, self._session_id)

    def _create_chroot(self, timeout: float) -> None:
        bootstrap = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        bootstrap.start(timeout)
        try:
            bootstrap.ensure_path(self.chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()

    async def close(self) -> None:
        """Close the session: its ephemeral znodes go at once (a clean shutdown needs no timeout)."""
        self._closing = True
        for w in list(self._watches):
            w.cancel()
        await asyncio.to_thread(self._close_blocking)

    def _close_blocking(self) -> None:
        try:
            self._zk.stop()
        finally:
            self._zk.close()

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def session_credentials(self) -> tuple[int, bytes]:
        """(session id, password): tests use them to expire this session from another client."""
        return self._zk.client_id

    # -- thread hand-off

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop closed between the check and the call

    def _call_handler(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("ZooKeeper watch handler failed")

    def _kazoo_state(self, state: str) -> None:  # kazoo thread; must not block
        session = self._zk.client_id[0] if state == KazooState.CONNECTED and self._zk.client_id else None
        self._to_loop(self._on_state, state, session)

    def _on_state(self, state: str, session: int | None) -> None:
        if self._closing:
            return
        if state == KazooState.SUSPENDED:
            self._connected.clear()
            log.warning(
                "ZooKeeper connection lost; waiting to reconnect (session 0x%x)", self._session_id or 0
            )
            self._notify(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._connected.clear()
            log.warning("ZooKeeper session 0x%x expired", self._session_id or 0)
            self._notify(SessionState.EXPIRED)
        elif state == KazooState.CONNECTED:
            if self._session_id is None:
                return  # the first connection, still inside start()
            new = session is not None and session != self._session_id
            if new:
                if self._session_id is not None and self._last_state is not SessionState.EXPIRED:
                    self._notify(SessionState.EXPIRED)
                self._session_id = session
            self._connected.set()
            log.info("ZooKeeper connected again (%s session 0x%x)", "new" if new else "same", session or 0)
            for w in list(self._watches):
                w.arm()
            self._notify(SessionState.NEW_SESSION if new else SessionState.CONNECTED)
            for w in list(self._watches):
                if w.active:
                    self._call_handler(w.on_change)

    def _notify(self, state: SessionState) -> None:
        self._last_state = state
        for fn in list(self._listeners):
            try:
                fn(state)
            except Exception:
                log.exception("ZooKeeper session listener failed")

    def add_session_listener(self, fn: Callable[[SessionState], None]) -> None:
        self._listeners.append(fn)

    def watch(self, path: str, kind: WatchKind, on_change: Callable[[], None]) -> Watch:
        w = _KazooWatch(self, path, kind, on_change)
        self._watches.add(w)
        w.arm()
        return w

    # -- requests

    async def _await(self, start: Callable[[], Any]) -> Any:
        """Run one kazoo async call; retry it after a connection loss once connected again."""
        loop = self._loop or asyncio.get_running_loop()
        while True:
            future = loop.create_future()

            def done(result: Any, future: asyncio.Future = future) -> None:  # kazoo thread
                try:
                    value = result.get(block=False)
                except Exception as exc:
                    self._to_loop(_set_exception, future, exc)
                else:
                    self._to_loop(_set_result, future, value)

            start().rawlink(done)
            try:
                return await future
            except ConnectionLoss:
                if self._closing:
                    raise
                if self.connected:  # the state change has not reached the loop yet
                    await asyncio.sleep(0.05)
                await self._connected.wait()

    async def get(self, path: str) -> tuple[bytes, Stat]:
        data, stat = await self._await(lambda: self._zk.get_async(path))
        return data or b"", _stat(stat)

    async def exists(self, path: str) -> Stat | None:
        stat = await self._await(lambda: self._zk.exists_async(path))
        return None if stat is None else _stat(stat)

    async def get_children(self, path: str) -> list[str]:
        return list(await self._await(lambda: self._zk.get_children_async(path)))

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
        makepath: bool = False,
    ) -> str:  # fmt: skip
        return await self._await(
            lambda: self._zk.create_async(
                path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath
            )
        )

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return _stat(await self._await(lambda: self._zk.set_async(path, data, version)))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            try:
                children = await self.get_children(path)
            except NoNodeError:
                children = []
            for child in children:
                await delete_if_exists(self, f"{path.rstrip('/')}/{child}", recursive=True)
        await self._await(lambda: self._zk.delete_async(path, version))

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        def start() -> Any:
            t = self._zk.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    t.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetOp):
                    t.set_data(op.path, op.data, op.version)
                elif isinstance(op, DeleteOp):
                    t.delete(op.path, op.version)
                else:
                    t.check(op.path, op.version)
            return t.commit_async()

        results = await self._await(start)
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise MultiError(index, result)
        for index, result in enumerate(results):
            if isinstance(result, Exception):
                raise MultiError(index, result)
        return [_stat(r) if hasattr(r, "czxid") else r for r in results]


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)


__all__ = [
    "BadVersionError",
    "CheckOp",
    "ConnectionLoss",
    "CreateOp",
    "DeleteOp",
    "KazooException",
    "KazooZkClient",
    "MultiError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "SessionExpiredError",
    "SessionState",
    "SetOp",
    "Stat",
    "WatchKind",
    "ZkClient",
    "children_or_empty",
    "delete_if_exists",
    "ensure_path",
    "get_or_none",
    "split_connect",
]
