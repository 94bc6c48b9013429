"""`python -m broker_runtime --config FILE [--override key=value ...]`: run one broker in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker_runtime", description="Run an Odradek broker.")
    parser.add_argument("--config", help="a Kafka-style .properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s [%(name)s] %(message)s"
    )

    from broker_runtime.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"odradek: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"odradek: cannot read configuration: {exc}", file=sys.stderr)
        return 2

    if config.zookeeper_connect is not None and config.broker_id < 0:
        if not config["broker.id.generation.enable"]:
            print(
                "odradek: configuration error: broker.id: set it, or broker.id.generation.enable=true, when "
                "zookeeper.connect is set",
                file=sys.stderr,
            )
            return 2
        try:
            config.use_generated_broker_id(_generated_id(config))
        except Exception as exc:  # ZooKeeper unreachable: the same message as a failed start
            print(f"odradek: cannot start: no broker.id from ZooKeeper at {config.zookeeper_connect}: {exc!r}",
                  file=sys.stderr)  # fmt: skip
            return 1
    if config["odradek.event.loop"] == "uvloop":
        import uvloop

        uvloop.install()
    try:
        return asyncio.run(_run(config))
    except KeyboardInterrupt:
        return 0


def _generated_id(config) -> int:
    from broker_runtime.cluster.zk_member import resolve_broker_id

    return asyncio.run(resolve_broker_id(config))


async def _run(config) -> int:
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from broker_runtime.broker import Broker
    from broker_runtime.cluster.metadata_store import MetadataFileError
    from broker_runtime.errors import KafkaError
    from broker_runtime.log.log_manager import LogDirError

    # Handlers first: a SIGTERM that arrives while the broker starts (it may be registered in ZooKeeper already)
    # is a controlled shutdown once the start is done, never the default death by signal.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        broker = Broker(config)
        await broker.start()
    except (OSError, LogDirError, MetadataFileError, KafkaError) as exc:
        logging.getLogger("broker_runtime").error("cannot start: %s", getattr(exc, "message", None) or exc)
        return 1
    except (KazooTimeoutError, KazooException) as exc:
        logging.getLogger("broker_runtime").error(
            "cannot start: ZooKeeper at %s: %s", config.zookeeper_connect, exc or type(exc).__name__
        )
        return 1
    # Either a signal (controlled shutdown) or a halt (storage failed: exit 1 without a clean shutdown).
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broker.halted.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    if broker.halted.is_set():
        await broker.stop(clean=False)
        return 1
    await broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
