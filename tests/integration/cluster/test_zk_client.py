"""The ZkClient contract, checked against a real ZooKeeper (kazoo) and the in-memory fake the simulations use:
the fake is only worth its simulations if it behaves like the real thing on everything below."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest
from kazoo.client import KazooClient

from broker_runtime.cluster.zk_client import (
    BadVersionError,
    CheckOp,
    CreateOp,
    KazooZkClient,
    MultiError,
    NodeExistsError,
    NoNodeError,
    SessionState,
    SetOp,
    WatchKind,
)
from tests.fake_zookeeper import FakeZooKeeper

DEADLINE_S = 30.0


class Ensemble:
    """Clients of one ZooKeeper (real or fake) and the fault a test needs: expiring a session."""

    def __init__(self, kind: str, connect: str | None) -> None:
        self.kind = kind
        self.connect = connect
        self.fake = FakeZooKeeper(seed=7) if kind == "fake" else None
        self.clients: list = []

    async def client(self):
        if self.fake is not None:
            c = self.fake.client()
        else:
            c = KazooZkClient(self.connect, session_timeout_ms=6000, connection_timeout_ms=10000)
        await c.start()
        self.clients.append(c)
        return c

    async def expire(self, client) -> None:
        if self.fake is not None:
            self.fake.expire(client)
            return
        # Closing a second connection that presents the same session id and password ends that session.
        session = client.session_credentials()

        def close_twin() -> None:
            twin = KazooClient(hosts=client.hosts, client_id=session)
            twin.start(10)
            twin.stop()
            twin.close()

        await asyncio.to_thread(close_twin)

    async def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()


@pytest.fixture(params=["fake", "real"])
def ensemble(request: pytest.FixtureRequest):
    connect = request.getfixturevalue("zk_connect") if request.param == "real" else None
    return Ensemble(request.param, connect)


def run(ensemble: Ensemble, body: Callable[[Ensemble], Awaitable[None]]) -> None:
    async def main() -> None:
        try:
            await asyncio.wait_for(body(ensemble), DEADLINE_S)
        finally:
            await ensemble.close()

    asyncio.run(main())


async def until(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S / 2
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_create_get_set_with_versions(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        zk = await e.client()
        assert await zk.create("/a", b"one") == "/a"
        data, stat = await zk.get("/a")
        assert (data, stat.version) == (b"one", 0)
        stat = await zk.set("/a", b"two", version=0)
        assert stat.version == 1
        with pytest.raises(BadVersionError):
            await zk.set("/a", b"three", version=0)
        assert (await zk.get("/a"))[0] == b"two"
        with pytest.raises(NodeExistsError):
            await zk.create("/a")
        with pytest.raises(NoNodeError):
            await zk.get("/missing")
        with pytest.raises(NoNodeError):
            await zk.create("/missing/child")
        assert await zk.create("/x/y/z", b"deep", makepath=True) == "/x/y/z"
        assert await zk.get_children("/x") == ["y"]
        assert await zk.exists("/nope") is None
        await zk.delete("/x", recursive=True)
        assert await zk.exists("/x") is None

    run(ensemble, body)


def test_ephemeral_znodes_belong_to_their_session(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        owner, other = await e.client(), await e.client()
        await other.create("/brokers", makepath=True)
        await owner.create("/brokers/1", b"reg", ephemeral=True)
        _, first = await other.get("/brokers/1")
        assert first.ephemeral_owner == owner.session_id
        with pytest.raises(NodeExistsError):
            await other.create("/brokers/1", b"imposter", ephemeral=True)
        await owner.close()
        assert await other.exists("/brokers/1") is None
        again = await e.client()
        await again.create("/brokers/1", b"reg", ephemeral=True)
        _, second = await other.get("/brokers/1")
        assert second.czxid > first.czxid  # the broker epoch grows with every registration

    run(ensemble, body)


def test_sequential_names_grow(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        zk = await e.client()
        await zk.create("/changes")
        names = [await zk.create("/changes/config_change_", b"{}", sequence=True) for _ in range(3)]
        assert names == sorted(names)
        assert len(set(names)) == 3
        assert all(
            n.startswith("/changes/config_change_") and len(n) == len("/changes/config_change_") + 10
            for n in names
        )

    run(ensemble, body)


def test_multi_is_all_or_nothing(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        zk = await e.client()
        await zk.create("/epoch", b"1")
        await zk.create("/state", b"old")
        with pytest.raises(MultiError) as failed:
            await zk.multi([CheckOp("/epoch", 5), SetOp("/state", b"new", 0), CreateOp("/other", b"x")])
        assert failed.value.index == 0
        assert isinstance(failed.value.cause, BadVersionError)
        assert (await zk.get("/state"))[0] == b"old"
        assert await zk.exists("/other") is None
        with pytest.raises(MultiError) as failed:
            await zk.multi([CheckOp("/epoch", 0), CreateOp("/state")])
        assert failed.value.index == 1
        await zk.multi([CheckOp("/epoch", 0), SetOp("/state", b"new", 0), CreateOp("/other", b"x")])
        assert (await zk.get("/state"))[0] == b"new"
        assert (await zk.get("/other"))[0] == b"x"

    run(ensemble, body)


def test_watches_persist_and_see_the_last_change(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        watcher, writer = await e.client(), await e.client()
        await writer.create("/ids")
        seen_data: list[bytes | None] = []
        seen_children: list[list[str]] = []

        async def read_data() -> None:
            stat = await watcher.exists("/node")
            seen_data.append(None if stat is None else (await watcher.get("/node"))[0])

        async def read_children() -> None:
            seen_children.append(await watcher.get_children("/ids"))

        watcher.watch("/node", WatchKind.DATA, lambda: asyncio.ensure_future(read_data()))
        watcher.watch("/ids", WatchKind.CHILDREN, lambda: asyncio.ensure_future(read_children()))
        # Arming is asynchronous; a read on the same session after it is answered after the watch is set
        # (the contract consumers rely on: arm, then read the state).
        await watcher.exists("/node")
        await writer.create("/node", b"v1")
        await until(lambda: seen_data[-1:] == [b"v1"], "the creation")
        await writer.set("/node", b"v2")
        await until(lambda: seen_data[-1:] == [b"v2"], "the change")
        await writer.delete("/node")
        await until(lambda: seen_data[-1:] == [None], "the deletion")
        await writer.create("/ids/1")
        await writer.create("/ids/2")
        await until(lambda: seen_children[-1:] == [["1", "2"]], "the children")
        await writer.delete("/ids/1")
        await until(lambda: seen_children[-1:] == [["2"]], "a child removed")

    run(ensemble, body)


def test_session_expiry_drops_ephemerals_and_a_new_session_follows(ensemble: Ensemble) -> None:
    async def body(e: Ensemble) -> None:
        victim, other = await e.client(), await e.client()
        await other.create("/ids")
        states: list[SessionState] = []
        victim.add_session_listener(states.append)
        calls = []
        victim.watch("/ids", WatchKind.CHILDREN, lambda: calls.append(1))
        await victim.create("/ids/1", b"", ephemeral=True)
        old_session = victim.session_id
        await until(lambda: len(calls) >= 1, "the watch on our own registration")
        calls.clear()
        await e.expire(victim)
        await until(lambda: SessionState.NEW_SESSION in states, "a new session")
        assert SessionState.EXPIRED in states
        assert states.index(SessionState.EXPIRED) < states.index(SessionState.NEW_SESSION)
        assert victim.session_id != old_session
        assert await other.exists("/ids/1") is None
        await until(lambda: len(calls) >= 1, "watches called again in the new session")
        await victim.create("/ids/1", b"", ephemeral=True)  # registering again works
        assert (await other.get("/ids/1"))[1].ephemeral_owner == victim.session_id

    run(ensemble, body)
