"""The layering rules of DESIGN §2, checked over every module's imports (including function-local ones)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in _modules(package):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("broker_runtime", ("console", "jobs", "django", "celery", "pyspark")),
        ("broker_runtime/protocol", ("asyncio", "broker_runtime.log", "broker_runtime.server", "broker_runtime.handlers")),
        ("broker_runtime/log", ("asyncio", "broker_runtime.server", "broker_runtime.handlers", "broker_runtime.replication")),
        # The controller decides from ZooKeeper and talks to brokers through requests only: it knows no broker's
        # storage, partitions, listener or handlers.
        ("broker_runtime/controller", ("broker_runtime.broker", "broker_runtime.log", "broker_runtime.replication",
                                       "broker_runtime.group", "broker_runtime.server", "broker_runtime.handlers")),
        ("broker_runtime/cluster", ("broker_runtime.server", "broker_runtime.handlers")),
        # The coordinator runtime is shared by the group and transaction coordinators and knows neither.
        ("broker_runtime/coordinator", ("broker_runtime.group", "broker_runtime.txn", "broker_runtime.handlers",
                                        "broker_runtime.server")),
        # the console reaches clusters only through Kafka clients and kazoo, never the broker's code
        ("console", ("broker_runtime",)),
        # the jobs reach a cluster over the Kafka protocol only, and never need the console
        ("jobs", ("broker_runtime", "console", "django", "celery")),
    ],
)
def test_package_does_not_import(package: str, forbidden: tuple[str, ...]) -> None:
    assert _modules(package), f"{package} has no modules: the rule would pass vacuously"
    assert _violations(package, forbidden) == []


def test_producer_state_is_pure() -> None:
    path = ROOT / "broker_runtime/txn/producer_state.py"
    assert "asyncio" not in _imports(path)
