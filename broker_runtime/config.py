"""Broker and topic configuration, with Kafka's names, types, defaults and validation.

Everything here is synchronous and pure (no asyncio, no I/O except `BrokerConfig.load` reading one file).

* `BROKER_CONFIG_DEFS` / `TOPIC_CONFIG_DEFS`: name -> `ConfigDef` (type, default, validator, doc, dynamic...).
* `BrokerConfig.load(path, overrides)`: Java ``.properties`` + ``--override key=value``; unknown keys and bad
  values raise `ConfigError` naming the key.
* `cfg["num.partitions"]` -> typed value (int, bool, str, list[str], float, or None when unset). Keys that Kafka
  resolves through a synonym chain give the *resolved* value in the key's own unit: ``log.retention.ms``
  (ms > minutes > hours), ``log.roll.ms``, ``log.roll.jitter.ms``, ``log.flush.interval.ms``, ``log.dirs``
  (falls back to ``log.dir``), ``advertised.listeners`` (falls back to ``listeners``),
  ``zookeeper.connection.timeout.ms`` (falls back to the session timeout), ``broker.id``. `cfg.raw(key)` gives
  the literal value of that key alone.
* Dynamic broker configs (AlterConfigs on a broker resource): `set_dynamic(key, value | None)`; per broker or,
  with ``cluster_default=True``, the cluster-wide default (``/config/brokers/<default>``).
* `effective_topic_config(overrides)`: every topic config as a string; override > dynamic broker synonym >
  dynamic cluster default > static broker synonym > default.
* `validate_topic_configs`, `describe_topic_configs`, `describe_broker_configs` for the admin APIs.

Deliberate choices (Odradek):

* ``broker.id`` defaults to -1 (unset) like Kafka. A standalone broker (no ``zookeeper.connect``) whose id is
  unset uses 0. In cluster mode an unset id stays -1 and the cluster layer must generate one (Kafka's
  ``/brokers/seqid`` scheme, ids above ``reserved.broker.max.id``) or refuse to start. ``node.id`` (the KRaft
  name) is accepted as an alias; if both are set they must agree.
* Unknown keys are an error (Kafka only logs a warning), with the closest known key suggested. Every other
  Kafka 3.9 broker key belongs to a feature Odradek does not build (TLS, SASL, KRaft, tiered storage, quotas,
  share groups...): it is refused with the feature named (`UNBUILT_BROKER_CONFIGS`), at start and through
  AlterConfigs and IncrementalAlterConfigs alike.
* Keys Odradek accepts but does not act on (thread counts, socket tuning, cluster, replication and
  transaction settings...) carry the reason in ``ConfigDef.no_effect``; setting one logs a WARNING.
* Which broker keys are dynamic (and per broker only) follows Kafka's DynamicBrokerConfig, ``listeners`` and
  ``advertised.listeners`` included; the running broker refuses a dynamic change it cannot apply
  (`BrokerConfig.add_check`).
* Listeners must be PLAINTEXT.
* DescribeConfigs follows Kafka's ConfigHelper exactly, including its quirk: a topic config's broker synonyms
  are listed from the first synonym name on, so ``retention.ms`` shows no synonym (and source DEFAULT_CONFIG)
  while only ``log.retention.hours`` is set — the *value* is still the resolved one.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)
DOUBLE_MAX = 1.7976931348623157e308


class ConfigError(Exception):
    """An unknown or invalid configuration. The message names the key; `.key` holds it (None for syntax)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


class ConfigType(IntEnum):
    """DescribeConfigs ``ConfigType`` ids (Kafka's DescribeConfigsResponse.ConfigType)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs ``ConfigSource`` ids (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1  # Kafka calls it TOPIC_CONFIG on the wire side
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# --------------------------------------------------------------------------------------------------------------
# Validators: take the parsed value, return None when fine or a phrase saying what is wrong.

Validator = Callable[[Any], "str | None"]


def at_least(minimum: float) -> Validator:
    def check(v: Any) -> str | None:
        if v is None or v >= minimum:
            return None
        return f"must be at least {_fmt_number(minimum)}"

    check.__doc__ = f"[{_fmt_number(minimum)},...]"
    return check


def between(lo: float, hi: float) -> Validator:
    def check(v: Any) -> str | None:
        if v is None or lo <= v <= hi:
            return None
        return f"must be between {_fmt_number(lo)} and {_fmt_number(hi)}"

    check.__doc__ = f"[{_fmt_number(lo)},...,{_fmt_number(hi)}]"
    return check


def one_of(*allowed: str) -> Validator:
    def check(v: Any) -> str | None:
        if v is None or v in allowed:
            return None
        return f"must be one of {', '.join(allowed)}"

    check.__doc__ = "[" + ", ".join(allowed) + "]"
    return check


def list_of(*allowed: str, allow_empty: bool = False) -> Validator:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if not v and not allow_empty:
            return f"must not be empty (a comma-separated list of {', '.join(allowed)})"
        bad = [x for x in v if x not in allowed]
        if bad:
            return f"'{bad[0]}' is not one of {', '.join(allowed)}"
        return None

    check.__doc__ = "[" + ", ".join(allowed) + "]"
    return check


def _non_empty_string(v: Any) -> str | None:
    if v is None or v.strip():
        return None
    return "must not be empty"


_THROTTLED_ENTRY = re.compile(r"^\d+:\d+$")


def _throttled_replicas(v: Any) -> str | None:
    # Kafka's ThrottledReplicaListValidator: "*" or a list of partitionId:brokerId
    if v is None or v == [] or v == ["*"]:
        return None
    for item in v:
        if not _THROTTLED_ENTRY.match(item.strip()):
            return f"'{item}' is not '*' or a list of partitionId:brokerId"
    return None


# Kafka 3.9's MetadataVersion values: release -> number of internal versions ("IV"s; 0 = the release has none).
# The release name alone stands for its latest internal version, for production releases only (not 4.0).
_METADATA_VERSION_IVS = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3,
    "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2,
    "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1, "4.0": 2,
}  # fmt: skip
_UNRELEASED = {"4.0"}
_METADATA_VERSIONS = frozenset(
    [release for release in _METADATA_VERSION_IVS if release not in _UNRELEASED]
    + [f"{release}-IV{i}" for release, ivs in _METADATA_VERSION_IVS.items() for i in range(ivs)]
)


def is_metadata_version(value: str) -> bool:
    """Whether Kafka's MetadataVersion.fromVersionString accepts `value`: a 0.x version is read by its first
    three parts ("0.10.0.0" is 0.10.0), a later one by its first two ("3.0.1" is 3.0); "3.0-IV1" names one
    internal version."""
    parts = value.split(".")
    significant = 3 if value.startswith("0.") else 2
    key = value if significant >= len(parts) else ".".join(parts[:significant])
    return key in _METADATA_VERSIONS


def _version(v: Any) -> str | None:
    # Kafka's MetadataVersionValidator: every version string Kafka 3.9 parses, deprecated or not.
    if v is None or is_metadata_version(v):
        return None
    return "is not a Kafka version (such as 0.10.0, 2.8 or 3.0-IV1)"


_HOST_PATTERN = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern


def parse_ip_overrides(value: str) -> dict[str, int]:
    """max.connections.per.ip.overrides, 'host:count,...'; the last ':' splits, so IPv6 addresses work (Kafka's
    Csv.parseCsvMap). Raises ValueError."""
    out = {}
    for item in re.split(r"\s*,\s*", value.strip()) if value.strip() else ():
        host, sep, count = item.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host or not _HOST_PATTERN.fullmatch(host):
            raise ValueError(f"{item!r} is not host:count")
        if not re.fullmatch(r"\d+", count):
            raise ValueError(f"the count of {host!r} is not a non-negative integer")
        out[host] = int(count)
    return out


def _ip_overrides(v: Any) -> str | None:
    try:
        parse_ip_overrides(v)
    except ValueError as exc:
        return f"is not a list of host:count ({exc})"
    return None


def parse_metrics_listener(value: str) -> tuple[str, int] | None:
    """`http://host:port` -> (host, port); "" -> None (metrics off). Raises ValueError saying what is wrong."""
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError("is not of the form http://host:port")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError("has an invalid port") from exc
    if port is None:
        raise ValueError("names no port")
    return parts.hostname, port


def _metrics_listener(v: Any) -> str | None:
    try:
        parse_metrics_listener(v)
    except ValueError as exc:
        return str(exc)
    return None


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


def _replica_selector(v: Any) -> str | None:
    if not v or v in (RACK_AWARE_SELECTOR, LEADER_SELECTOR):
        return None
    return f"is not supported: the selectors are {LEADER_SELECTOR} and {RACK_AWARE_SELECTOR} (no plugins)"


def _empty_only(what: str) -> Validator:
    def check(v: Any) -> str | None:
        if not v:
            return None
        return f"is not supported: Odradek has no {what}"

    return check


def _only(allowed: Any, unbuilt: str) -> Validator:
    """The setting of a feature that is not built: only its "off" value is accepted."""

    def check(v: Any) -> str | None:
        if v is None or v == allowed:
            return None
        return f"is not supported: {unbuilt}"

    check.__doc__ = f"[{_show(allowed)}]"
    return check


def _false_only(unbuilt: str) -> Validator:
    return _only(False, unbuilt)


def _fmt_number(x: float) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return str(x)


# --------------------------------------------------------------------------------------------------------------
# Config definitions


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any  # parsed value; None means "no default" (null)
    doc: str
    validator: Validator | None = None
    dynamic: bool = False  # broker keys: updatable with AlterConfigs (topic keys are always updatable)
    per_broker_only: bool = False  # dynamic, but only on a broker resource, not the cluster default
    sensitive: bool = False
    # Accepted (a Kafka config loads) but with no effect in Odradek, and why; setting it logs a WARNING.
    no_effect: str | None = None
    synonyms: tuple[str, ...] = ()  # topic keys: broker synonyms, most specific first

    def parse(self, raw: Any) -> Any:
        """String (or already-typed value) -> typed value, validated. Raises ConfigError naming the key."""
        value = _parse_type(self.name, self.type, raw)
        if self.validator is not None and value is not None:
            problem = self.validator(value)
            if problem:
                raise ConfigError(f"{self.name}: {_show(raw)} {problem}", self.name)
        return value

    def format(self, value: Any) -> str | None:
        return format_value(self.type, value)

    @property
    def valid_values(self) -> str:
        return (self.validator.__doc__ or "") if self.validator else ""


def _show(raw: Any) -> str:
    if isinstance(raw, str):
        return repr(raw)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)


_INT_RE = re.compile(r"^[+-]?\d+$")


def _parse_type(name: str, t: ConfigType, raw: Any) -> Any:
    if raw is None:
        return None
    if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: {_show(raw)} is not an integer", name)
        if isinstance(raw, int):
            v = raw
        else:
            s = str(raw).strip()
            if not _INT_RE.match(s):
                kind = (
                    "a long" if t == ConfigType.LONG else "a short" if t == ConfigType.SHORT else "an integer"
                )
                raise ConfigError(f"{name}: {_show(raw)} is not {kind}", name)
            v = int(s)
        lo, hi, kind = {
            ConfigType.INT: (INT_MIN, INT_MAX, "int"),
            ConfigType.LONG: (LONG_MIN, LONG_MAX, "long"),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "short"),
        }[t]
        if not lo <= v <= hi:
            raise ConfigError(f"{name}: {_show(raw)} is out of range for a {kind} ({lo}..{hi})", name)
        return v
    if t == ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s == "true":
            return True
        if s == "false":
            return False
        raise ConfigError(f"{name}: {_show(raw)} is not a boolean (expected true or false)", name)
    if t == ConfigType.DOUBLE:
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: {_show(raw)} is not a number", name)
        if isinstance(raw, int | float):
            v = float(raw)
        else:
            try:
                v = float(str(raw).strip())
            except ValueError:
                raise ConfigError(f"{name}: {_show(raw)} is not a number", name)
        if math.isnan(v):
            raise ConfigError(f"{name}: {_show(raw)} is not a number", name)
        return v
    if t == ConfigType.LIST:
        if isinstance(raw, list | tuple):
            return [str(x).strip() for x in raw]
        s = str(raw).strip()
        return [] if not s else [x.strip() for x in s.split(",")]
    # STRING, CLASS, PASSWORD
    return str(raw).strip()


def format_value(t: ConfigType, value: Any) -> str | None:
    """Typed value -> the string Kafka would show (ConfigDef.convertToString)."""
    if value is None:
        return None
    if t == ConfigType.BOOLEAN:
        return "true" if value else "false"
    if t == ConfigType.LIST:
        return ",".join(value)
    if t == ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


def _java_double(x: float) -> str:
    """Approximates Java's Double.toString: 0.5 -> '0.5', 1e7 -> '1.0E7', Double.MAX -> '1.7976931348623157E308'."""
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e7:
        s = repr(x)
        return s if ("." in s or "e" in s) else s + ".0"
    mantissa, exp = f"{x:.17e}".split("e")
    # shortest round-tripping mantissa
    for digits in range(1, 18):
        cand = f"{x:.{digits - 1}e}"
        if float(cand) == x:
            mantissa, exp = cand.split("e")
            break
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exp)}"


def _d(
    name: str,
    t: ConfigType,
    default: Any,
    doc: str,
    validator: Validator | None = None,
    **kw: Any,
) -> ConfigDef:
    return ConfigDef(name, t, default, doc, validator, **kw)


BOOL, STR, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.CLASS,
    ConfigType.PASSWORD,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")

# Kafka features Odradek does not build, named in the errors and warnings of the settings that belong to them.
TIERED_STORAGE = "tiered storage is not built"

# fmt: off
_BROKER_DEFS: list[ConfigDef] = [
    # ---- identity, listeners, cluster membership
    _d("broker.id", INT, -1, "The broker id. -1 (the default) means unset: a standalone broker then uses 0; in "
       "ZooKeeper mode the cluster layer generates one above reserved.broker.max.id.", at_least(-1)),
    _d("node.id", INT, -1, "KRaft's name for the broker id, accepted as an alias of broker.id (they must agree "
       "when both are set).", at_least(-1)),
    _d("broker.id.generation.enable", BOOL, True, "Generate a broker id when broker.id is unset (ZooKeeper mode)."),
    _d("reserved.broker.max.id", INT, 1000, "Largest broker id that may be configured; generated ids start above "
       "it.", at_least(0)),
    _d("broker.rack", STR, None, "Rack of the broker, used for rack-aware replica assignment."),
    _d("inter.broker.protocol.version", STR, "3.9-IV0", "Inter-broker protocol version.", _version),
    _d("authorizer.class.name", STR, "", "Authorizer class. Odradek has no authorization; must stay empty.",
       _empty_only("authorizer")),
    _d("create.topic.policy.class.name", CLASS, None, "CreateTopics policy. Unsupported; must stay unset.",
       _empty_only("pluggable topic policies")),
    _d("alter.config.policy.class.name", CLASS, None, "AlterConfigs policy. Unsupported; must stay unset.",
       _empty_only("pluggable config policies")),
    _d("listeners", STR, "PLAINTEXT://:9092", "Comma-separated listener URIs NAME://host:port the broker binds. "
       "An empty host binds all interfaces. Dynamic per broker, as in Kafka; Odradek serves the first listener "
       "and refuses a dynamic update that would change what it binds (restart the broker instead).",
       _non_empty_string, dynamic=True, per_broker_only=True),
    _d("advertised.listeners", STR, None, "Listeners handed to clients in Metadata responses, if different from "
       "listeners. Must be reachable by clients; 0.0.0.0 is rejected. Dynamic per broker: clients are handed "
       "the new address at once.", dynamic=True, per_broker_only=True),
    _d("listener.security.protocol.map", STR,
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Map of listener name to security protocol, as NAME:PROTOCOL pairs.", dynamic=True, per_broker_only=True),
    _d("inter.broker.listener.name", STR, None, "Listener used between brokers; defaults to the one using "
       "security.inter.broker.protocol."),
    _d("security.inter.broker.protocol", STR, "PLAINTEXT", "Security protocol used between brokers.",
       one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _d("control.plane.listener.name", STR, None, "Dedicated controller listener (unused)."),
    _d("zookeeper.connect", STR, None, "ZooKeeper connection string host:port[,host:port...][/chroot]. Unset means "
       "a standalone single-node cluster with metadata in a local file."),
    _d("zookeeper.session.timeout.ms", INT, 18000, "ZooKeeper session timeout.", at_least(1)),
    _d("zookeeper.connection.timeout.ms", INT, None, "Max time to wait for a ZooKeeper connection; defaults to "
       "zookeeper.session.timeout.ms."),
    _d("zookeeper.max.in.flight.requests", INT, 10, "Max unacknowledged requests to ZooKeeper.", at_least(1)),
    _d("zookeeper.set.acl", BOOL, False, "Set secure ACLs on znodes."),
    # ---- topics
    _d("num.partitions", INT, 1, "Default number of partitions of auto-created topics.", at_least(1)),
    _d("default.replication.factor", INT, 1, "Default replication factor of auto-created topics.", at_least(1)),
    _d("min.insync.replicas", INT, 1, "Minimum ISR size for acks=all produce requests to succeed.", at_least(1),
       dynamic=True),
    _d("auto.create.topics.enable", BOOL, True, "Create a topic when a Metadata request names an unknown one."),
    _d("delete.topic.enable", BOOL, True, "Allow DeleteTopics; when false deletion requests are refused."),
    # ---- log
    _d("log.dir", STR, "/tmp/kafka-logs", "Log directory, used when log.dirs is not set."),
    _d("log.dirs", STR, None, "Comma-separated log directories; when unset log.dir is used."),
    _d("log.retention.ms", LONG, None, "Time to keep a log segment before deleting it; -1 = no time limit. Wins "
       "over log.retention.minutes and log.retention.hours.", dynamic=True),
    _d("log.retention.minutes", INT, None, "Retention in minutes; used when log.retention.ms is unset."),
    _d("log.retention.hours", INT, 168, "Retention in hours; used when log.retention.ms and "
       "log.retention.minutes are unset."),
    _d("log.retention.bytes", LONG, -1, "Max size of a partition's log before old segments are deleted; "
       "-1 = unlimited.", dynamic=True),
    _d("log.segment.bytes", INT, 1073741824, "Max size of a single log segment file.", at_least(14),
       dynamic=True),
    _d("log.roll.ms", LONG, None, "Max time before a new segment is rolled; wins over log.roll.hours.",
       dynamic=True),
    _d("log.roll.hours", INT, 168, "Max time in hours before a new segment is rolled.", at_least(1)),
    _d("log.roll.jitter.ms", LONG, None, "Max random jitter subtracted from the roll time; wins over "
       "log.roll.jitter.hours.", dynamic=True),
    _d("log.roll.jitter.hours", INT, 0, "Max random jitter in hours subtracted from the roll time.",
       at_least(0)),
    _d("log.retention.check.interval.ms", LONG, 300000, "How often retention is checked.", at_least(1)),
    _d("log.flush.interval.messages", LONG, LONG_MAX, "Messages accumulated on a partition before an fsync.",
       at_least(1), dynamic=True),
    _d("log.flush.interval.ms", LONG, None, "Max time a message stays unflushed; defaults to "
       "log.flush.scheduler.interval.ms.", dynamic=True),
    _d("log.flush.scheduler.interval.ms", LONG, LONG_MAX, "How often the flusher checks whether a log needs "
       "flushing."),
    _d("log.flush.offset.checkpoint.interval.ms", INT, 60000, "How often the recovery point is checkpointed.",
       at_least(0)),
    _d("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, "How often log start offsets are "
       "checkpointed.", at_least(0)),
    _d("log.index.interval.bytes", INT, 4096, "Bytes appended between offset index entries.", at_least(0),
       dynamic=True),
    _d("log.index.size.max.bytes", INT, 10485760, "Max size of an offset index file.", at_least(4),
       dynamic=True),
    _d("log.segment.delete.delay.ms", LONG, 60000, "Delay before a deleted segment's files are removed.",
       at_least(0), dynamic=True),
    _d("log.cleanup.policy", LIST, ["delete"], "Default cleanup policy: delete, compact or both.",
       list_of(*CLEANUP_POLICIES), dynamic=True),
    _d("log.message.timestamp.type", STR, "CreateTime", "Whether record timestamps are the producer's "
       "(CreateTime) or the broker's append time (LogAppendTime).", one_of(*TIMESTAMP_TYPES), dynamic=True),
    _d("log.message.timestamp.before.max.ms", LONG, LONG_MAX, "Max allowed distance of a CreateTime timestamp "
       "into the past.", at_least(0), dynamic=True),
    _d("log.message.timestamp.difference.max.ms", LONG, LONG_MAX, "Deprecated (Kafka 3.6): max difference "
       "between a CreateTime timestamp and the broker's clock; used for before/after when those are at their "
       "default.", at_least(0), dynamic=True),
    _d("log.message.format.version", STR, "3.0-IV1", "Deprecated message format version (batches are always "
       "written in format v2).", _version),
    _d("log.message.timestamp.after.max.ms", LONG, LONG_MAX, "Max allowed distance of a CreateTime timestamp "
       "into the future.", at_least(0), dynamic=True),
    _d("log.message.downconversion.enable", BOOL, True, "Down-convert batches for old fetchers.",
       dynamic=True),
    _d("log.preallocate", BOOL, False, "Preallocate segment files.", dynamic=True),
    _d("log.local.retention.ms", LONG, -2, "Local retention for tiered storage (-2 = retention.ms). Tiered "
       "storage is not supported.", _only(-2, TIERED_STORAGE), dynamic=True),
    _d("log.local.retention.bytes", LONG, -2, "Local retention bytes for tiered storage (-2 = retention.bytes). "
       "Tiered storage is not supported.", _only(-2, TIERED_STORAGE), dynamic=True),
    _d("remote.log.storage.system.enable", BOOL, False, "Tiered storage (must stay false).",
       _false_only(TIERED_STORAGE)),
    _d("num.recovery.threads.per.data.dir", INT, 1, "Threads per log dir for recovery at startup.",
       at_least(1), dynamic=True),
    _d("message.max.bytes", INT, 1048588, "Largest record batch size allowed (topic-level: max.message.bytes).",
       at_least(0), dynamic=True),
    _d("compression.type", STR, "producer", "Final compression of topic data; producer keeps the producer's "
       "codec.", one_of(*COMPRESSION_TYPES), dynamic=True),
    _d("compression.gzip.level", INT, -1, "Gzip level for compression.type=gzip.", None, dynamic=True),
    _d("compression.lz4.level", INT, 9, "LZ4 level for compression.type=lz4.", between(1, 17), dynamic=True),
    _d("compression.zstd.level", INT, 3, "Zstd level for compression.type=zstd.", between(-131072, 22),
       dynamic=True),
    # ---- log cleaner
    _d("log.cleaner.enable", BOOL, True, "Run the log cleaner (needed for compacted topics)."),
    _d("log.cleaner.threads", INT, 1, "Number of cleaner threads.", at_least(0), dynamic=True),
    _d("log.cleaner.dedupe.buffer.size", LONG, 134217728, "Memory for deduplication across cleaner threads.",
       dynamic=True),
    _d("log.cleaner.io.buffer.size", INT, 524288, "I/O buffer memory across cleaner threads.", at_least(0),
       dynamic=True),
    _d("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9, "Dedupe buffer load factor.", dynamic=True),
    _d("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX, "Cleaner I/O throttle.", dynamic=True),
    _d("log.cleaner.backoff.ms", LONG, 15000, "Sleep when there is nothing to clean.", at_least(0), dynamic=True),
    _d("log.cleaner.delete.retention.ms", LONG, 86400000, "How long tombstones are kept in compacted topics.",
       at_least(0), dynamic=True),
    _d("log.cleaner.min.compaction.lag.ms", LONG, 0, "Min time a record stays uncompacted.", at_least(0),
       dynamic=True),
    _d("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, "Max time a record stays ineligible for compaction.",
       at_least(1), dynamic=True),
    _d("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, "Min dirty ratio for a log to be cleaned.", between(0, 1),
       dynamic=True),
    # ---- network
    _d("socket.request.max.bytes", INT, 104857600, "Largest request accepted on a socket.", at_least(1)),
    _d("socket.send.buffer.bytes", INT, 102400, "SO_SNDBUF; -1 = OS default."),
    _d("socket.receive.buffer.bytes", INT, 102400, "SO_RCVBUF; -1 = OS default."),
    _d("socket.listen.backlog.size", INT, 50, "Listen backlog.", at_least(1)),
    _d("num.network.threads", INT, 3, "Network threads.", at_least(1), dynamic=True),
    _d("num.io.threads", INT, 8, "Request handler threads.", at_least(1), dynamic=True),
    _d("background.threads", INT, 10, "Background threads.", at_least(1), dynamic=True),
    _d("queued.max.requests", INT, 500, "Max requests read off the sockets whose handler has not started; at the "
       "limit no connection takes another request until handlers catch up.", at_least(1)),
    _d("connections.max.idle.ms", LONG, 600000, "Connections without traffic for this long are closed; -1 = "
       "never."),
    _d("max.connections", INT, INT_MAX, "Max connections on the broker.", at_least(0), dynamic=True),
    _d("max.connections.per.ip", INT, INT_MAX, "Max connections from one IP.", at_least(0), dynamic=True),
    _d("max.connections.per.ip.overrides", STR, "", "Per-IP or hostname overrides of max.connections.per.ip, "
       "as host:count,...", _ip_overrides, dynamic=True),
    _d("max.connection.creation.rate", INT, INT_MAX, "Max new connections per second.", at_least(0),
       dynamic=True),
    _d("queued.max.request.bytes", LONG, -1, "Memory pool for request bytes: a request's size is reserved "
       "before it is read, and reading stops while the pool is used up; -1 = no limit."),
    _d("request.timeout.ms", INT, 30000,
       "Timeout of the broker's own client requests (inter-broker); how long a transaction marker waits for "
       "its replicated append."),
    _d("max.request.partition.size.limit", INT, 2000, "Max partitions described in one DescribeTopicPartitions "
       "response.", at_least(1)),
    _d("fetch.max.bytes", INT, 57671680, "Max bytes returned by one Fetch response.", at_least(1024)),
    _d("max.incremental.fetch.session.cache.slots", INT, 1000, "Max incremental fetch sessions.", at_least(0)),
    _d("fetch.purgatory.purge.interval.requests", INT, 1000, "Fetch purgatory purge interval."),
    _d("producer.purgatory.purge.interval.requests", INT, 1000, "Produce purgatory purge interval."),
    _d("delete.records.purgatory.purge.interval.requests", INT, 1, "DeleteRecords purgatory purge interval."),
    # ---- group coordinator / __consumer_offsets
    _d("offsets.topic.replication.factor", SHORT, 3, "Replication factor of __consumer_offsets; creation fails "
       "until this many brokers are alive.", at_least(1)),
    _d("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets (do not change after "
       "creation).", at_least(1)),
    _d("offsets.topic.segment.bytes", INT, 104857600, "Segment size of __consumer_offsets.", at_least(1)),
    _d("offsets.topic.compression.codec", INT, 0, "Compression codec id for __consumer_offsets.", between(0, 4)),
    _d("offsets.retention.minutes", INT, 10080, "Committed offsets of an empty group are kept this long.",
       at_least(1)),
    _d("offsets.retention.check.interval.ms", LONG, 600000, "How often stale offsets are checked.", at_least(1)),
    _d("offset.metadata.max.bytes", INT, 4096, "Max size of the metadata string of an offset commit."),
    _d("offsets.commit.timeout.ms", INT, 5000, "Offset commit waits this long for the replicated append.",
       at_least(1)),
    _d("offsets.commit.required.acks", SHORT, -1, "Acks for offset commits (deprecated)."),
    _d("offsets.load.buffer.size", INT, 5242880, "Batch size read when loading offsets into the cache.",
       at_least(1)),
    _d("group.initial.rebalance.delay.ms", INT, 3000, "Delay of the first rebalance of an empty group, to let "
       "more members join."),
    _d("group.min.session.timeout.ms", INT, 6000, "Min session timeout of a group member."),
    _d("group.max.session.timeout.ms", INT, 1800000, "Max session timeout of a group member."),
    _d("group.max.size", INT, INT_MAX, "Max members of one consumer group.", at_least(1)),
    # ---- transactions / producer ids
    _d("transaction.state.log.replication.factor", SHORT, 3, "Replication factor of __transaction_state.",
       at_least(1)),
    _d("transaction.state.log.min.isr", INT, 2, "min.insync.replicas of __transaction_state.", at_least(1)),
    _d("transaction.state.log.num.partitions", INT, 50, "Partitions of __transaction_state.", at_least(1)),
    _d("transaction.state.log.segment.bytes", INT, 104857600, "Segment size of __transaction_state.",
       at_least(1)),
    _d("transaction.state.log.load.buffer.size", INT, 5242880, "Batch size read when loading transaction "
       "state.", at_least(1)),
    _d("transaction.max.timeout.ms", INT, 900000, "Max transaction timeout a producer may ask for.", at_least(1)),
    _d("transactional.id.expiration.ms", INT, 604800000, "Transactional ids idle this long expire.", at_least(1)),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, "How often timed-out "
       "transactions are aborted.", at_least(1)),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, "How often expired "
       "transactional ids are removed.", at_least(1)),
    _d("producer.id.expiration.ms", INT, 86400000, "Idle producer ids' state is dropped after this long.",
       at_least(1), dynamic=True),
    _d("producer.id.expiration.check.interval.ms", INT, 600000, "How often expired producer ids are removed.",
       at_least(1)),
    _d("transaction.partition.verification.enable", BOOL, True, "Partition leaders ask the transaction "
       "coordinator that a partition is in the producer's transaction before appending its first transactional "
       "data (KIP-890).", dynamic=True),
    # ---- replication
    _d("replica.lag.time.max.ms", LONG, 30000, "A follower not caught up for this long leaves the ISR."),
    _d("replica.fetch.wait.max.ms", INT, 500, "Max wait of a follower fetch (long poll)."),
    _d("replica.fetch.min.bytes", INT, 1, "Min bytes for a follower fetch to return."),
    _d("replica.fetch.max.bytes", INT, 1048576, "Bytes fetched per partition by followers.", at_least(0)),
    _d("replica.fetch.response.max.bytes", INT, 10485760, "Max bytes of a follower fetch response.",
       at_least(0)),
    _d("replica.fetch.backoff.ms", INT, 1000, "Follower sleep after a fetch error.", at_least(0)),
    _d("replica.socket.timeout.ms", INT, 30000, "Socket timeout of follower fetches."),
    _d("replica.socket.receive.buffer.bytes", INT, 65536, "SO_RCVBUF of follower fetches."),
    _d("socket.connection.setup.timeout.ms", LONG, 10000, "Wait for a connection to another broker."),
    _d("socket.connection.setup.timeout.max.ms", LONG, 30000, "Max wait for a connection to another broker."),
    _d("unclean.leader.election.interval.ms", LONG, 300000, "How often a KRaft controller looks for leaderless "
       "partitions to elect unclean leaders.", at_least(1)),
    _d("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, "How often high watermarks are "
       "checkpointed."),
    _d("num.replica.alter.log.dirs.threads", INT, None, "Threads moving replicas between log dirs."),
    _d("replica.selector.class", CLASS, None, "How a leader picks the replica a consumer fetches from (KIP-392): "
       "unset or LeaderSelector, the leader; RackAwareReplicaSelector, a replica in the consumer's client.rack.",
       _replica_selector),
    _d("num.replica.fetchers", INT, 1, "Fetcher tasks per source broker.", at_least(1), dynamic=True),
    _d("replication.quota.window.num", INT, 11, "Samples kept to measure replication throttles.", at_least(1)),
    _d("replication.quota.window.size.seconds", INT, 1, "Time span of each replication throttle sample.",
       at_least(1)),
    _d("unclean.leader.election.enable", BOOL, False, "Allow an out-of-ISR replica to become leader (may lose "
       "data).", dynamic=True),
    _d("auto.leader.rebalance.enable", BOOL, True, "Move leadership back to preferred replicas periodically."),
    _d("leader.imbalance.per.broker.percentage", INT, 10, "Allowed leader imbalance per broker, percent."),
    _d("leader.imbalance.check.interval.seconds", LONG, 300, "How often leader balance is checked.",
       at_least(1)),
    _d("controlled.shutdown.enable", BOOL, True, "Move leadership away before shutting down."),
    _d("controlled.shutdown.max.retries", INT, 3, "Retries of controlled shutdown."),
    _d("controlled.shutdown.retry.backoff.ms", LONG, 5000, "Backoff between controlled shutdown retries."),
    _d("controller.socket.timeout.ms", INT, 30000, "Socket timeout of controller-to-broker requests."),
    _d("leader.replication.throttled.rate", LONG, LONG_MAX, "Replication throttle of leaders, bytes/s (applies to "
       "leader.replication.throttled.replicas).", at_least(0), dynamic=True),
    _d("follower.replication.throttled.rate", LONG, LONG_MAX, "Replication throttle of followers, bytes/s.",
       at_least(0), dynamic=True),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", LONG, LONG_MAX, "Throttle of moves between log dirs.",
       at_least(0), dynamic=True),
    # ---- Odradek
    _d("odradek.event.loop", STR, "asyncio", "Event loop implementation: asyncio or uvloop.",
       one_of("asyncio", "uvloop")),
    _d("odradek.metrics.listener", STR, "", "Where the broker serves Prometheus metrics at /metrics, as "
       "http://host:port (port 0 picks a free one); empty: not served.", _metrics_listener),
]

# fmt: on

# Every accepted broker key that Odradek does not act on, by reason. Setting one (in the file, with --override or
# with AlterConfigs) logs a WARNING naming the key and the reason; README lists them.
_NO_EFFECT_BROKER: dict[str, tuple[str, ...]] = {
    "brokers reach each other on the one listener Odradek serves": (
        "inter.broker.listener.name", "security.inter.broker.protocol", "control.plane.listener.name",
    ),
    "the ZooKeeper client keeps its own request window and creates znodes without ACLs": (
        "zookeeper.max.in.flight.requests", "zookeeper.set.acl",
    ),
    "requests between brokers time out by controller.socket.timeout.ms and replica.socket.timeout.ms": (
        "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms",
    ),
    "the ZooKeeper-mode controller elects unclean leaders when a partition's config allows it, not on a "
    "timer": ("unclean.leader.election.interval.ms",),
    "replica fetchers use the operating system's socket buffer sizes": ("replica.socket.receive.buffer.bytes",),
    "a broker has one log dir per partition and never moves replicas between its log dirs": (
        "replica.alter.log.dirs.io.max.bytes.per.second", "num.replica.alter.log.dirs.threads",
    ),
    "one event loop serves every connection, request and log": (
        "num.network.threads", "num.io.threads", "background.threads", "num.recovery.threads.per.data.dir",
    ),
    "waiting requests are woken by events; there are no purgatories to purge": (
        "fetch.purgatory.purge.interval.requests", "producer.purgatory.purge.interval.requests",
        "delete.records.purgatory.purge.interval.requests",
    ),
    "the listener uses the operating system's socket buffer sizes and its own backlog": (
        "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "socket.listen.backlog.size",
    ),
    "connection creation is not rate-limited": ("max.connection.creation.rate",),
    "fetch sessions (KIP-227) are not built: every fetch is a full fetch": (
        "max.incremental.fetch.session.cache.slots",
    ),
    "recovery point, log start offset and high watermark checkpoints are written together, every "
    "log.flush.offset.checkpoint.interval.ms": (
        "log.flush.start.offset.checkpoint.interval.ms", "replica.high.watermark.checkpoint.interval.ms",
    ),
    "Odradek speaks one protocol version, and writes record batch format v2 only (Kafka 3.x ignores the message "
    "format version too)": ("inter.broker.protocol.version", "log.message.format.version"),
    "fetches never need down-conversion: every Fetch version served reads record batch format v2": (
        "log.message.downconversion.enable",
    ),
    "segment files are not preallocated": ("log.preallocate",),
    "a recompressing topic uses each codec's default level": (
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    ),
    "offset commits always wait for the in-sync replicas, as with Kafka's default (-1)": (
        "offsets.commit.required.acks",
    ),
}  # fmt: skip

_NO_EFFECT_TOPIC: dict[str, tuple[str, ...]] = {
    "a recompressing topic uses each codec's default level": (
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    ),
    "batches are always written in format v2 (Kafka 3.x ignores the message format version too)": (
        "message.format.version",
    ),
    "fetches never need down-conversion: every Fetch version served reads record batch format v2": (
        "message.downconversion.enable",
    ),
    "segment files are not preallocated": ("preallocate",),
}  # fmt: skip


def _with_reasons(defs: list[ConfigDef], reasons: Mapping[str, tuple[str, ...]]) -> dict[str, ConfigDef]:
    by_name = {d.name: d for d in defs}
    for reason, names in reasons.items():
        for name in names:
            by_name[name] = replace(by_name[name], no_effect=reason)
    return by_name


BROKER_CONFIG_DEFS: dict[str, ConfigDef] = _with_reasons(_BROKER_DEFS, _NO_EFFECT_BROKER)

# fmt: off
_TOPIC_DEFS: list[ConfigDef] = [
    _d("cleanup.policy", LIST, ["delete"], "delete removes old segments by time or size; compact keeps the latest "
       "record of each key; both may be combined.", list_of(*CLEANUP_POLICIES), synonyms=("log.cleanup.policy",)),
    _d("compression.type", STR, "producer", "Final compression of the topic's data; producer keeps the "
       "producer's codec.", one_of(*COMPRESSION_TYPES), synonyms=("compression.type",)),
    _d("compression.gzip.level", INT, -1, "Gzip level.", None, synonyms=("compression.gzip.level",)),
    _d("compression.lz4.level", INT, 9, "LZ4 level.", between(1, 17), synonyms=("compression.lz4.level",)),
    _d("compression.zstd.level", INT, 3, "Zstd level.", between(-131072, 22),
       synonyms=("compression.zstd.level",)),
    _d("delete.retention.ms", LONG, 86400000, "How long tombstones are kept on compacted topics.", at_least(0),
       synonyms=("log.cleaner.delete.retention.ms",)),
    _d("file.delete.delay.ms", LONG, 60000, "Delay before a deleted segment's files are removed.", at_least(0),
       synonyms=("log.segment.delete.delay.ms",)),
    _d("flush.messages", LONG, LONG_MAX, "fsync after this many messages.", at_least(1),
       synonyms=("log.flush.interval.messages",)),
    _d("flush.ms", LONG, LONG_MAX, "fsync after this much time.", at_least(0),
       synonyms=("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    _d("follower.replication.throttled.replicas", LIST, [], "Replicas throttled on the follower side: '*' or "
       "partitionId:brokerId,...", _throttled_replicas),
    _d("index.interval.bytes", INT, 4096, "Bytes between offset index entries.", at_least(0),
       synonyms=("log.index.interval.bytes",)),
    _d("leader.replication.throttled.replicas", LIST, [], "Replicas throttled on the leader side: '*' or "
       "partitionId:brokerId,...", _throttled_replicas),
    _d("local.retention.bytes", LONG, -2, "Tiered storage local retention (-2 = retention.bytes). Unsupported.",
       _only(-2, TIERED_STORAGE), synonyms=("log.local.retention.bytes",)),
    _d("local.retention.ms", LONG, -2, "Tiered storage local retention (-2 = retention.ms). Unsupported.",
       _only(-2, TIERED_STORAGE), synonyms=("log.local.retention.ms",)),
    _d("max.compaction.lag.ms", LONG, LONG_MAX, "Max time a record stays ineligible for compaction.", at_least(1),
       synonyms=("log.cleaner.max.compaction.lag.ms",)),
    _d("max.message.bytes", INT, 1048588, "Largest record batch (after compression) the topic accepts.",
       at_least(0), synonyms=("message.max.bytes",)),
    _d("message.downconversion.enable", BOOL, True, "Down-convert for old consumers.",
       synonyms=("log.message.downconversion.enable",)),
    _d("message.timestamp.after.max.ms", LONG, LONG_MAX, "Max distance of a CreateTime timestamp into the "
       "future.", at_least(0), synonyms=("log.message.timestamp.after.max.ms",)),
    _d("message.format.version", STR, "3.0-IV1", "Deprecated message format version (batches are always written "
       "in format v2).", _version, synonyms=("log.message.format.version",)),
    _d("message.timestamp.difference.max.ms", LONG, LONG_MAX, "Deprecated: max difference between a "
       "CreateTime timestamp and the broker's clock; used for before/after when those are at their default.",
       at_least(0), synonyms=("log.message.timestamp.difference.max.ms",)),
    _d("message.timestamp.before.max.ms", LONG, LONG_MAX, "Max distance of a CreateTime timestamp into the past.",
       at_least(0), synonyms=("log.message.timestamp.before.max.ms",)),
    _d("message.timestamp.type", STR, "CreateTime", "CreateTime or LogAppendTime.", one_of(*TIMESTAMP_TYPES),
       synonyms=("log.message.timestamp.type",)),
    _d("min.cleanable.dirty.ratio", DOUBLE, 0.5, "Min dirty ratio for the log to be compacted.", between(0, 1),
       synonyms=("log.cleaner.min.cleanable.ratio",)),
    _d("min.compaction.lag.ms", LONG, 0, "Min time a record stays uncompacted.", at_least(0),
       synonyms=("log.cleaner.min.compaction.lag.ms",)),
    _d("min.insync.replicas", INT, 1, "Min ISR size for acks=all.", at_least(1), synonyms=("min.insync.replicas",)),
    _d("preallocate", BOOL, False, "Preallocate segment files.", synonyms=("log.preallocate",)),
    _d("remote.log.copy.disable", BOOL, False, "Tiered storage copy switch (must stay false).",
       _false_only(TIERED_STORAGE)),
    _d("remote.log.delete.on.disable", BOOL, False, "Tiered storage cleanup switch (must stay false).",
       _false_only(TIERED_STORAGE)),
    _d("remote.storage.enable", BOOL, False, "Tiered storage (must stay false).", _false_only(TIERED_STORAGE)),
    _d("retention.bytes", LONG, -1, "Max size of each partition before old segments are deleted; -1 = no limit.",
       synonyms=("log.retention.bytes",)),
    _d("retention.ms", LONG, 604800000, "Max age of a segment's newest record before the segment is deleted; "
       "-1 = no time limit.", at_least(-1),
       synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    _d("segment.bytes", INT, 1073741824, "Segment file size.", at_least(14), synonyms=("log.segment.bytes",)),
    _d("segment.index.bytes", INT, 10485760, "Offset index size (preallocated).", at_least(4),
       synonyms=("log.index.size.max.bytes",)),
    _d("segment.jitter.ms", LONG, 0, "Random jitter subtracted from segment.ms.", at_least(0),
       synonyms=("log.roll.jitter.ms", "log.roll.jitter.hours")),
    _d("segment.ms", LONG, 604800000, "Roll a new segment after this long even if not full.", at_least(1),
       synonyms=("log.roll.ms", "log.roll.hours")),
    _d("unclean.leader.election.enable", BOOL, False, "Allow an out-of-ISR replica to become leader.",
       synonyms=("unclean.leader.election.enable",)),
]

# fmt: on

TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = _with_reasons(
    sorted(_TOPIC_DEFS, key=lambda d: d.name), _NO_EFFECT_TOPIC
)

# Broker keys whose value is in a different unit from their topic / resolved counterpart (factor to ms).
_TO_MS = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms groups (plus log.dirs/log.dir, node.id/broker.id).
_BROKER_SYNONYM_GROUPS: list[tuple[str, ...]] = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.dirs", "log.dir"),
]


def broker_config_synonyms(name: str) -> list[str]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the names that can supply `name`'s value, in order."""
    if name == "log.flush.scheduler.interval.ms":
        return [name]
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


# --------------------------------------------------------------------------------------------------------------
# Java .properties parsing


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (java.util.Properties.load rules): ``#``/``!`` comments, ``key=value``,
    ``key: value`` and ``key value``, backslash escapes (\\t \\n \\r \\f \\uXXXX), line continuations.
    Later duplicates win, as in Java."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # join continuation lines: an odd number of trailing backslashes
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        key_chars: list[str] = []
        j = 0
        n = len(line)
        while j < n:
            c = line[j]
            if c == "\\":
                j += 1
                key_chars.append("\\" + (line[j] if j < n else ""))
            elif c in "=: \t\f":
                break
            else:
                key_chars.append(c)
            j += 1
        # skip whitespace, then at most one separator, then whitespace
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        key = _unescape("".join(key_chars))
        value = _unescape(line[j:])
        out[key] = value
    return out


def _continues(line: str) -> bool:
    count = 0
    for c in reversed(line):
        if c != "\\":
            break
        count += 1
    return count % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        c = s[i]
        if c == "u":
            hexdigits = s[i + 1 : i + 5]
            if len(hexdigits) != 4 or not all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                raise ConfigError(f"malformed \\uxxxx escape in properties: '\\u{hexdigits}'")
            out.append(chr(int(hexdigits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    return "".join(out)


def parse_override(item: str) -> tuple[str, str]:
    """``key=value`` (as given to ``--override``) -> (key, value)."""
    if "=" not in item:
        raise ConfigError(f"invalid override '{item}': expected key=value")
    key, value = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"invalid override '{item}': empty key")
    return key, value


# Every other Kafka 3.9 broker config, by the feature Odradek does not build: refused with the reason, at start
# and through AlterConfigs and IncrementalAlterConfigs alike. (Kafka's topic configs are all defined above.)
_KRAFT = "KRaft mode is not built; run standalone or in ZooKeeper mode"
_UNBUILT_BROKER_CONFIGS: dict[str, tuple[str, ...]] = {
    "TLS is not built (PLAINTEXT listeners only)": (
        "ssl.allow.dn.changes", "ssl.allow.san.changes", "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols",
        "ssl.endpoint.identification.algorithm", "ssl.engine.factory.class", "ssl.key.password",
        "ssl.keymanager.algorithm", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
        "ssl.keystore.password", "ssl.keystore.type", "ssl.principal.mapping.rules", "ssl.protocol", "ssl.provider",
        "ssl.secure.random.implementation", "ssl.trustmanager.algorithm", "ssl.truststore.certificates",
        "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type", "security.providers",
        "principal.builder.class", "zookeeper.clientCnxnSocket", "zookeeper.ssl.cipher.suites",
        "zookeeper.ssl.client.enable", "zookeeper.ssl.crl.enable", "zookeeper.ssl.enabled.protocols",
        "zookeeper.ssl.endpoint.identification.algorithm", "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type", "zookeeper.ssl.ocsp.enable",
        "zookeeper.ssl.protocol", "zookeeper.ssl.truststore.location", "zookeeper.ssl.truststore.password",
        "zookeeper.ssl.truststore.type",
    ),
    "SASL is not built (PLAINTEXT listeners only)": (
        "sasl.client.callback.handler.class", "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
        "sasl.kerberos.service.name", "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
        "sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms",
        "sasl.login.retry.backoff.ms", "sasl.mechanism.inter.broker.protocol", "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.token.endpoint.url",
        "sasl.server.callback.handler.class", "sasl.server.max.receive.size", "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
    ),
    "delegation tokens are not built": (
        "delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms", "delegation.token.master.key",
        "delegation.token.max.lifetime.ms", "delegation.token.secret.key",
    ),
    "dynamic password configs are not built (nothing to encode without TLS or SASL)": (
        "password.encoder.cipher.algorithm", "password.encoder.iterations", "password.encoder.key.length",
        "password.encoder.keyfactory.algorithm", "password.encoder.old.secret", "password.encoder.secret",
    ),
    _KRAFT: (
        "process.roles", "controller.listener.names", "controller.quorum.append.linger.ms",
        "controller.quorum.bootstrap.servers", "controller.quorum.election.backoff.max.ms",
        "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
        "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms", "controller.quorum.voters",
        "broker.heartbeat.interval.ms", "broker.session.timeout.ms", "initial.broker.registration.timeout.ms",
        "eligible.leader.replicas.enable", "log.dir.failure.timeout.ms", "metadata.log.dir",
        "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
        "metadata.log.segment.bytes", "metadata.log.segment.min.bytes", "metadata.log.segment.ms",
        "metadata.max.idle.interval.ms", "metadata.max.retention.bytes", "metadata.max.retention.ms",
        "sasl.mechanism.controller.protocol", "server.max.startup.time.ms", "zookeeper.metadata.migration.enable",
        "zookeeper.metadata.migration.min.batch.size",
    ),
    TIERED_STORAGE: (
        "remote.fetch.max.wait.ms", "remote.log.index.file.cache.total.size.bytes",
        "remote.log.manager.copier.thread.pool.size", "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.copy.quota.window.num", "remote.log.manager.copy.quota.window.size.seconds",
        "remote.log.manager.expiration.thread.pool.size", "remote.log.manager.fetch.max.bytes.per.second",
        "remote.log.manager.fetch.quota.window.num", "remote.log.manager.fetch.quota.window.size.seconds",
        "remote.log.manager.task.interval.ms", "remote.log.manager.task.retry.backoff.max.ms",
        "remote.log.manager.task.retry.backoff.ms", "remote.log.manager.task.retry.jitter",
        "remote.log.manager.thread.pool.size", "remote.log.metadata.custom.metadata.max.bytes",
        "remote.log.metadata.manager.class.name", "remote.log.metadata.manager.class.path",
        "remote.log.metadata.manager.impl.prefix", "remote.log.metadata.manager.listener.name",
        "remote.log.reader.max.pending.tasks", "remote.log.reader.threads", "remote.log.storage.manager.class.name",
        "remote.log.storage.manager.class.path", "remote.log.storage.manager.impl.prefix",
    ),
    "the KIP-848 consumer group protocol is not built (groups use the classic protocol)": (
        "group.consumer.assignors", "group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
        "group.consumer.max.session.timeout.ms", "group.consumer.max.size", "group.consumer.migration.policy",
        "group.consumer.min.heartbeat.interval.ms", "group.consumer.min.session.timeout.ms",
        "group.consumer.session.timeout.ms", "group.coordinator.append.linger.ms", "group.coordinator.new.enable",
        "group.coordinator.rebalance.protocols", "group.coordinator.threads",
    ),
    "share groups (KIP-932) are not built": (
        "group.share.delivery.count.limit", "group.share.enable", "group.share.heartbeat.interval.ms",
        "group.share.max.groups", "group.share.max.heartbeat.interval.ms", "group.share.max.record.lock.duration.ms",
        "group.share.max.session.timeout.ms", "group.share.max.size", "group.share.min.heartbeat.interval.ms",
        "group.share.min.record.lock.duration.ms", "group.share.min.session.timeout.ms",
        "group.share.partition.max.record.locks", "group.share.record.lock.duration.ms",
        "group.share.session.timeout.ms",
    ),
    "quotas are not built": (
        "quota.window.num", "quota.window.size.seconds", "alter.log.dirs.replication.quota.window.num",
        "alter.log.dirs.replication.quota.window.size.seconds", "controller.quota.window.num",
        "controller.quota.window.size.seconds", "client.quota.callback.class",
    ),
    "metrics reporters (JMX, plugins, client telemetry) are not built": (
        "metric.reporters", "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms",
        "kafka.metrics.reporters", "kafka.metrics.polling.interval.secs", "auto.include.jmx.reporter",
        "telemetry.max.bytes",
    ),
    "authorization is not built (listeners start with the broker)": ("early.start.listeners",),
    "unstable protocol and feature versions are not served": (
        "unstable.api.versions.enable", "unstable.feature.versions.enable",
    ),
    "it is an internal Kafka setting for tests": ("log.initial.task.delay.ms",),
}  # fmt: skip
UNBUILT_BROKER_CONFIGS: dict[str, str] = {
    name: reason for reason, names in _UNBUILT_BROKER_CONFIGS.items() for name in names
}
# Families of Kafka keys by prefix: per-listener overrides (listener.name.<listener>.<config>).
_UNBUILT_PREFIXES = (
    ("listener.name.", "per-listener overrides are not built (Odradek serves one listener)"),
)


def _unknown(key: str, known: Iterable[str], what: str = "configuration") -> ConfigError:
    """The error for a key Odradek does not define: a Kafka key of an unbuilt feature says so, any other key is
    unknown (with the closest known key suggested)."""
    if what == "configuration":
        reason = UNBUILT_BROKER_CONFIGS.get(key) or next(
            (r for prefix, r in _UNBUILT_PREFIXES if key.startswith(prefix)), None
        )
        if reason is not None:
            return ConfigError(f"{key}: Kafka setting not supported by Odradek: {reason}", key)
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown {what} '{key}'{hint}", key)


def broker_config_def(key: str) -> ConfigDef:
    """The definition of a broker key; ConfigError (unknown, or a Kafka key of an unbuilt feature) otherwise."""
    d = BROKER_CONFIG_DEFS.get(key)
    if d is None:
        raise _unknown(key, BROKER_CONFIG_DEFS)
    return d


def topic_config_def(key: str) -> ConfigDef:
    """The definition of a topic key; ConfigError naming the key otherwise."""
    d = TOPIC_CONFIG_DEFS.get(key)
    if d is None:
        raise _unknown(key, TOPIC_CONFIG_DEFS, "topic configuration")
    return d


def without_effect(keys: Iterable[str], defs: Mapping[str, ConfigDef]) -> dict[str, list[str]]:
    """{reason: [keys]} for the given keys that Odradek accepts but does not act on (for the warning)."""
    out: dict[str, list[str]] = {}
    for key in keys:
        d = defs.get(key)
        if d is not None and d.no_effect is not None:
            out.setdefault(d.no_effect, []).append(key)
    return out


# --------------------------------------------------------------------------------------------------------------
# Listeners


@dataclass(frozen=True)
class Listener:
    name: str  # e.g. PLAINTEXT
    host: str  # "" = all interfaces (bind) / unset (advertise)
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_.\-]+)://\[?([0-9A-Za-z\-%._:]*?)\]?:(-?\d+)$")


def parse_listeners(key: str, value: str, protocol_map: Mapping[str, str]) -> list[Listener]:
    result: list[Listener] = []
    seen: set[str] = set()
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(f"{key}: '{item}' is not a listener of the form NAME://host:port", key)
        name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port {port} of '{item}' is out of range 0..65535", key)
        if name in seen:
            raise ConfigError(f"{key}: listener name {name} appears more than once", key)
        seen.add(name)
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(
                f"{key}: no security protocol defined for listener {name} "
                f"(add it to listener.security.protocol.map)",
                key,
            )
        result.append(Listener(name, host, port, protocol))
    return result


def _parse_protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        if ":" not in item:
            raise ConfigError(
                f"listener.security.protocol.map: '{item}' is not NAME:PROTOCOL",
                "listener.security.protocol.map",
            )
        name, proto = (x.strip() for x in item.split(":", 1))
        proto = proto.upper()
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(
                f"listener.security.protocol.map: unknown security protocol '{proto}' for listener {name}",
                "listener.security.protocol.map",
            )
        out[name.upper()] = proto
    return out


# --------------------------------------------------------------------------------------------------------------
# Describe results


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    synonyms: list[ConfigSynonym]
    config_type: ConfigType
    documentation: str | None


# --------------------------------------------------------------------------------------------------------------
# The broker's configuration


class BrokerConfig:
    """Static broker configuration (file + overrides) plus dynamic broker configs layered on top."""

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        self._static: dict[str, Any] = {}
        for key, raw in (props or {}).items():
            self._static[key] = broker_config_def(key).parse(raw)
        self._dynamic: dict[str, Any] = {}  # per broker (/config/brokers/<id>)
        self._dynamic_default: dict[str, Any] = {}  # cluster default (/config/brokers/<default>)
        self._listeners_cb: list[Callable[[str], None]] = []
        self._extra_checks: list[Callable[[BrokerConfig], None]] = []
        self._validate()

    # ---- construction

    @classmethod
    def load(cls, path: str | Path | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"cannot read config file {path}: {e.strerror or e}")
            except UnicodeDecodeError:
                text = Path(path).read_text(encoding="latin-1")
            props.update(parse_properties(text))
        for item in overrides:
            key, value = parse_override(item)
            props[key] = value
        return cls(props)

    # ---- lookups

    def _layers(self, key: str) -> Iterable[tuple[ConfigSource, Any]]:
        if key in self._dynamic:
            yield ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic[key]
        if key in self._dynamic_default:
            yield ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default[key]
        if key in self._static:
            yield ConfigSource.STATIC_BROKER_CONFIG, self._static[key]
        default = BROKER_CONFIG_DEFS[key].default
        if default is not None:
            yield ConfigSource.DEFAULT_CONFIG, default

    def raw(self, key: str) -> Any:
        """The value of exactly this key (dynamic > cluster default > static > default); None if unset."""
        if key not in BROKER_CONFIG_DEFS:
            raise _unknown(key, BROKER_CONFIG_DEFS)
        for _, value in self._layers(key):
            return value
        return None

    def source(self, key: str) -> ConfigSource:
        for src, _ in self._layers(key):
            return src
        return ConfigSource.DEFAULT_CONFIG

    def is_set(self, key: str) -> bool:
        """True if the key was given in the file/overrides or dynamically (not just defaulted)."""
        return key in self._static or key in self._dynamic or key in self._dynamic_default

    def _chain(self, names: Iterable[str]) -> tuple[str, Any] | None:
        """First non-null value along a synonym chain, as Kafka resolves it: per name, then per layer."""
        for name in names:
            for _, value in self._layers(name):
                return name, value
        return None

    def _resolved_ms(self, names: Iterable[str]) -> int | None:
        hit = self._chain(names)
        if hit is None:
            return None
        name, value = hit
        return value * _TO_MS.get(name, 1)

    def __getitem__(self, key: str) -> Any:
        if key not in BROKER_CONFIG_DEFS:
            raise _unknown(key, BROKER_CONFIG_DEFS)
        if key == "log.retention.ms":
            ms = self._resolved_ms(broker_config_synonyms(key))
            return -1 if ms is not None and ms < 0 else ms
        if key in ("log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"):
            return self._resolved_ms(broker_config_synonyms(key))
        if key == "log.dirs":
            return self.log_dirs
        if key == "advertised.listeners":
            v = self.raw("advertised.listeners")
            return v if v is not None else self.raw("listeners")
        if key == "zookeeper.connection.timeout.ms":
            v = self.raw(key)
            return v if v is not None else self.raw("zookeeper.session.timeout.ms")
        if key in ("broker.id", "node.id"):
            return self.broker_id
        return self.raw(key)

    def get(self, key: str, default: Any = None) -> Any:
        v = self[key]
        return default if v is None else v

    def __contains__(self, key: object) -> bool:
        return key in BROKER_CONFIG_DEFS

    # ---- convenience properties

    @property
    def zookeeper_connect(self) -> str | None:
        v = self.raw("zookeeper.connect")
        return v or None

    @property
    def standalone(self) -> bool:
        return self.zookeeper_connect is None

    def use_generated_broker_id(self, broker_id: int) -> None:
        """A cluster broker started without broker.id takes one from meta.properties or ZooKeeper (above
        reserved.broker.max.id, which a configured id may not exceed)."""
        self._static["broker.id"] = broker_id

    @property
    def broker_id(self) -> int:
        bid = self.raw("broker.id")
        if bid == -1:
            bid = self.raw("node.id")
        if bid == -1 and self.standalone:
            return 0
        return bid

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.raw("log.dirs")
        if dirs is None:
            dirs = self.raw("log.dir")
        return [d.strip() for d in dirs.split(",") if d.strip()]

    @property
    def protocol_map(self) -> dict[str, str]:
        return _parse_protocol_map(self.raw("listener.security.protocol.map"))

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners("listeners", self.raw("listeners"), self.protocol_map)

    @property
    def advertised_listeners(self) -> list[Listener]:
        v = self.raw("advertised.listeners")
        if v is None:
            return self.listeners
        return parse_listeners("advertised.listeners", v, self.protocol_map)

    @property
    def inter_broker_listener_name(self) -> str:
        name = self.raw("inter.broker.listener.name")
        if name:
            return name.upper()
        proto = self.raw("security.inter.broker.protocol")
        for listener in self.advertised_listeners:
            if listener.security_protocol == proto:
                return listener.name
        return proto

    # ---- validation across keys (KafkaConfig.validateValues)

    def _validate(self) -> None:
        bid = self.raw("broker.id")
        nid = self.raw("node.id")
        if bid != -1 and nid != -1 and bid != nid:
            raise ConfigError(f"node.id: {nid} differs from broker.id {bid}; set only one of them", "node.id")
        effective_id = bid if bid != -1 else nid
        if (
            effective_id != -1
            and not self.standalone
            and self.raw("broker.id.generation.enable")
            and effective_id > self.raw("reserved.broker.max.id")
        ):
            raise ConfigError(
                f"broker.id: {effective_id} is greater than reserved.broker.max.id "
                f"{self.raw('reserved.broker.max.id')}",
                "broker.id",
            )
        if not self.log_dirs:
            raise ConfigError("log.dirs: no log directory given", "log.dirs")
        listeners = self.listeners
        if not listeners:
            raise ConfigError("listeners: no listener given", "listeners")
        for listener in listeners:
            if listener.security_protocol != "PLAINTEXT":
                raise ConfigError(
                    f"listeners: {listener} uses {listener.security_protocol}; Odradek serves PLAINTEXT only",
                    "listeners",
                )
        advertised = self.advertised_listeners
        for listener in advertised:
            if listener.host == "0.0.0.0":
                raise ConfigError(
                    f"advertised.listeners: '{listener}' uses the non-routable meta-address 0.0.0.0; "
                    "advertise an address clients can reach",
                    "advertised.listeners",
                )
        names = {x.name for x in listeners}
        for listener in advertised:
            if listener.name not in names:
                raise ConfigError(
                    f"advertised.listeners: listener {listener.name} is not in listeners",
                    "advertised.listeners",
                )
        ibl = self.raw("inter.broker.listener.name")
        if ibl and ibl.upper() not in {x.name for x in advertised}:
            raise ConfigError(
                f"inter.broker.listener.name: {ibl} is not one of the advertised listeners",
                "inter.broker.listener.name",
            )
        if not ibl:
            proto = self.raw("security.inter.broker.protocol")
            if not any(x.security_protocol == proto for x in advertised):
                raise ConfigError(
                    f"security.inter.broker.protocol: no advertised listener uses {proto}; set "
                    "inter.broker.listener.name or add such a listener",
                    "security.inter.broker.protocol",
                )
        roll_ms = self["log.roll.ms"]
        if roll_ms < 1:
            raise ConfigError(f"log.roll.ms: {roll_ms} must be at least 1", "log.roll.ms")
        jitter_ms = self["log.roll.jitter.ms"]
        if jitter_ms < 0:
            raise ConfigError(f"log.roll.jitter.ms: {jitter_ms} must be at least 0", "log.roll.jitter.ms")
        retention_ms = self["log.retention.ms"]
        if retention_ms == 0:
            hit = self._chain(broker_config_synonyms("log.retention.ms"))
            key = hit[0] if hit else "log.retention.ms"
            raise ConfigError(f"{key}: 0 is invalid; retention must be -1 (unlimited) or at least 1 ms", key)
        threads = self.raw("log.cleaner.threads")
        if threads > 0 and self.raw("log.cleaner.dedupe.buffer.size") / threads <= 1024 * 1024:
            raise ConfigError(
                "log.cleaner.dedupe.buffer.size: must be at least 1MB per cleaner thread",
                "log.cleaner.dedupe.buffer.size",
            )
        wait = self.raw("replica.fetch.wait.max.ms")
        if wait > self.raw("replica.socket.timeout.ms"):
            raise ConfigError(
                f"replica.fetch.wait.max.ms: {wait} is greater than replica.socket.timeout.ms "
                f"{self.raw('replica.socket.timeout.ms')}",
                "replica.fetch.wait.max.ms",
            )
        if wait > self.raw("replica.lag.time.max.ms"):
            raise ConfigError(
                f"replica.fetch.wait.max.ms: {wait} is greater than replica.lag.time.max.ms "
                f"{self.raw('replica.lag.time.max.ms')} (followers would drop out of the ISR)",
                "replica.fetch.wait.max.ms",
            )
        if self.raw("max.connections.per.ip") == 0 and not self.raw("max.connections.per.ip.overrides"):
            raise ConfigError(
                "max.connections.per.ip: can be set to zero only if max.connections.per.ip.overrides is set",
                "max.connections.per.ip",
            )
        queued = self.raw("queued.max.request.bytes")
        if 0 < queued < self.raw("socket.request.max.bytes"):
            raise ConfigError(
                f"queued.max.request.bytes: {queued} is less than socket.request.max.bytes "
                f"{self.raw('socket.request.max.bytes')}",
                "queued.max.request.bytes",
            )
        if self.raw("odradek.event.loop") == "uvloop" and importlib.util.find_spec("uvloop") is None:
            raise ConfigError(
                "odradek.event.loop: 'uvloop' is selected but the uvloop package is not installed",
                "odradek.event.loop",
            )
        gmin, gmax = self.raw("group.min.session.timeout.ms"), self.raw("group.max.session.timeout.ms")
        if gmin > gmax:
            raise ConfigError(
                f"group.max.session.timeout.ms: {gmax} is less than group.min.session.timeout.ms {gmin}",
                "group.max.session.timeout.ms",
            )
        lag_min = self.raw("log.cleaner.min.compaction.lag.ms")
        lag_max = self.raw("log.cleaner.max.compaction.lag.ms")
        if lag_min > lag_max:
            raise ConfigError(
                f"log.cleaner.min.compaction.lag.ms: {lag_min} is greater than log.cleaner.max.compaction.lag.ms "
                f"{lag_max}",
                "log.cleaner.min.compaction.lag.ms",
            )
        for check in self._extra_checks:
            check(self)

    # ---- dynamic broker configs

    def _check_dynamic_key(self, key: str, cluster_default: bool) -> ConfigDef:
        d = broker_config_def(key)
        if not d.dynamic:
            raise ConfigError(
                f"{key}: cannot be updated dynamically (read-only; set it in the properties file)", key
            )
        if cluster_default and d.per_broker_only:
            raise ConfigError(f"{key}: can only be updated per broker, not as a cluster-wide default", key)
        return d

    def validate_dynamic(self, key: str, value: str | None, *, cluster_default: bool = False) -> Any:
        """Check an AlterConfigs change without applying it; returns the parsed value (None = delete)."""
        d = self._check_dynamic_key(key, cluster_default)
        return None if value is None else d.parse(value)

    def set_dynamic(
        self, key: str, value: str | None, *, cluster_default: bool = False, validate_only: bool = False
    ) -> None:
        """Set (or with None, remove) a dynamic broker config: per broker, or the cluster-wide default.
        With validate_only, every check (including cross-key ones) runs but nothing changes."""
        parsed = self.validate_dynamic(key, value, cluster_default=cluster_default)
        layer = self._dynamic_default if cluster_default else self._dynamic
        had, old = key in layer, layer.get(key)

        def put(present: bool, v: Any) -> None:
            if present:
                layer[key] = v
            else:
                layer.pop(key, None)

        put(parsed is not None, parsed)
        try:
            self._validate()
        except ConfigError:
            put(had, old)
            raise
        if validate_only:
            put(had, old)
            return
        if old != parsed:
            for cb in list(self._listeners_cb):
                cb(key)

    def replace_dynamic(
        self, configs: Mapping[str, str | None], *, cluster_default: bool = False, validate_only: bool = False
    ) -> None:
        """Replace the whole dynamic set (legacy AlterConfigs, or loading /config/brokers at startup).
        All-or-nothing: validates every entry (and the cross-key checks) before applying any.
        None values are dropped."""
        parsed = {k: self.validate_dynamic(k, v, cluster_default=cluster_default) for k, v in configs.items()}
        parsed = {k: v for k, v in parsed.items() if v is not None}
        layer_name = "_dynamic_default" if cluster_default else "_dynamic"
        old = getattr(self, layer_name)
        setattr(self, layer_name, parsed)
        try:
            self._validate()
        except ConfigError:
            setattr(self, layer_name, old)
            raise
        if validate_only:
            setattr(self, layer_name, old)
            return
        for key in sorted(set(old) | set(parsed)):
            if old.get(key) != parsed.get(key):
                for cb in list(self._listeners_cb):
                    cb(key)

    def dynamic_configs(self, *, cluster_default: bool = False) -> dict[str, str]:
        """Current dynamic configs as strings (what would be stored in ZooKeeper)."""
        layer = self._dynamic_default if cluster_default else self._dynamic
        return {k: BROKER_CONFIG_DEFS[k].format(v) or "" for k, v in layer.items()}

    def static_configs(self) -> dict[str, str]:
        return {k: BROKER_CONFIG_DEFS[k].format(v) or "" for k, v in self._static.items()}

    def add_change_listener(self, fn: Callable[[str], None]) -> None:
        """fn(key) after a dynamic broker config changes (e.g. to push new topic defaults to the logs)."""
        self._listeners_cb.append(fn)

    def add_check(self, fn: Callable[[BrokerConfig], None]) -> None:
        """fn(config) runs with the cross-key checks on every candidate dynamic change and raises ConfigError to
        refuse it (what the running broker can apply, e.g. its bound listener)."""
        self._extra_checks.append(fn)

    def set_keys(self) -> set[str]:
        """Every key given in the file, on the command line or dynamically (not just defaulted)."""
        return set(self._static) | set(self._dynamic) | set(self._dynamic_default)

    # ---- topic configs

    def topic_default(self, name: str) -> tuple[str | None, ConfigSource, str | None]:
        """(value string, source, supplying broker key) of a topic config without a topic override."""
        d = TOPIC_CONFIG_DEFS[name]
        hit = self._chain(d.synonyms) if d.synonyms else None
        if hit is None:
            return d.format(d.default), ConfigSource.DEFAULT_CONFIG, None
        bname, value = hit
        src = next(s for s, _ in self._layers(bname))
        if bname in _TO_MS:
            value = value * _TO_MS[bname]
        if name == "retention.ms" and value < 0:
            value = -1
        return d.format(value), src, bname

    def effective_topic_config(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """Every topic config's effective value as a string, for LogConfig.from_topic_config.
        override > dynamic broker synonym > dynamic cluster default > static broker synonym > default.
        Overrides are validated (ConfigError on an unknown key or bad value)."""
        clean = validate_topic_configs(overrides or {}) if overrides else {}
        out: dict[str, str] = {}
        for name in TOPIC_CONFIG_DEFS:
            if name in clean:
                out[name] = clean[name]
            else:
                value, _, _ = self.topic_default(name)
                out[name] = value if value is not None else ""
        return out


# --------------------------------------------------------------------------------------------------------------
# Topic config validation and describe


def validate_topic_configs(
    configs: Mapping[str, str | None],
    *,
    allow_null: bool = False,
    broker_config: BrokerConfig | None = None,
) -> dict[str, str]:
    """Validate topic config overrides (CreateTopics / AlterConfigs). Returns them normalised (Kafka's string
    form: "compact,delete", "true", ints without padding). Raises ConfigError naming the first bad key.

    A None value is an error ("Null value not supported") unless allow_null, when it is dropped (= delete).
    With broker_config the cross-key checks (min.compaction.lag.ms <= max.compaction.lag.ms) use the effective
    values, otherwise only the given ones."""
    out: dict[str, str] = {}
    parsed: dict[str, Any] = {}
    for key, raw in configs.items():
        d = topic_config_def(key)
        if raw is None:
            if allow_null:
                continue
            raise ConfigError(f"{key}: null value not supported for topic configs", key)
        value = d.parse(raw)
        parsed[key] = value
        out[key] = d.format(value) or ""

    def effective(name: str) -> Any:
        if name in parsed:
            return parsed[name]
        if broker_config is not None:
            s, _, _ = broker_config.topic_default(name)
            return TOPIC_CONFIG_DEFS[name].parse(s)
        return None

    lag_min, lag_max = effective("min.compaction.lag.ms"), effective("max.compaction.lag.ms")
    if lag_min is not None and lag_max is not None and lag_min > lag_max:
        raise ConfigError(
            f"min.compaction.lag.ms: {lag_min} is greater than max.compaction.lag.ms {lag_max}",
            "min.compaction.lag.ms",
        )
    return out


def message_timestamp_bounds(effective: Mapping[str, str]) -> tuple[int, int]:
    """(before_max_ms, after_max_ms) a CreateTime timestamp may differ from the broker clock, from effective
    topic configs. Like Kafka 3.6+, the deprecated message.timestamp.difference.max.ms applies to a side whose
    own setting is still Long.MAX."""
    diff = int(effective.get("message.timestamp.difference.max.ms", LONG_MAX))
    before = int(effective.get("message.timestamp.before.max.ms", LONG_MAX))
    after = int(effective.get("message.timestamp.after.max.ms", LONG_MAX))
    return (diff if before == LONG_MAX else before, diff if after == LONG_MAX else after)


def _broker_synonyms_for(
    cfg: BrokerConfig, name: str, names: list[str], *, per_broker: bool = True
) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms: all layers of all synonym names (source-major order), then
    everything before the first entry for `name` itself is dropped."""
    out: list[ConfigSynonym] = []
    layers: list[tuple[ConfigSource, Callable[[str], tuple[bool, Any]]]] = [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, lambda n: (n in cfg._dynamic, cfg._dynamic.get(n))),
        (
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            lambda n: (n in cfg._dynamic_default, cfg._dynamic_default.get(n)),
        ),
        (ConfigSource.STATIC_BROKER_CONFIG, lambda n: (n in cfg._static, cfg._static.get(n))),
        (
            ConfigSource.DEFAULT_CONFIG,
            lambda n: (BROKER_CONFIG_DEFS[n].default is not None, BROKER_CONFIG_DEFS[n].default),
        ),
    ]
    for source, lookup in layers:
        if not per_broker and source != ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
            continue
        for n in names:
            present, value = lookup(n)
            if present:
                d = BROKER_CONFIG_DEFS[n]
                out.append(ConfigSynonym(n, None if d.sensitive else d.format(value), source))
    while out and out[0].name != name:
        out.pop(0)
    return out


def describe_topic_configs(
    broker_config: BrokerConfig,
    overrides: Mapping[str, str],
    include_synonyms: bool = False,
    include_docs: bool = False,
    names: Iterable[str] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs for a TOPIC resource: every topic config (or just `names`), as Kafka reports them."""
    wanted = list(TOPIC_CONFIG_DEFS) if names is None else [n for n in names if n in TOPIC_CONFIG_DEFS]
    effective = broker_config.effective_topic_config(
        {k: v for k, v in overrides.items() if k in TOPIC_CONFIG_DEFS}
    )
    entries: list[ConfigEntry] = []
    for name in wanted:
        d = TOPIC_CONFIG_DEFS[name]
        value = effective[name]
        synonyms: list[ConfigSynonym] = []
        if d.synonyms:
            first = d.synonyms[0]
            synonyms = _broker_synonyms_for(broker_config, first, broker_config_synonyms(first))
        if name in overrides:
            synonyms.insert(0, ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=source,
                read_only=False,
                is_sensitive=d.sensitive,
                synonyms=synonyms if include_synonyms else [],
                config_type=d.type,
                documentation=d.doc if include_docs else None,
            )
        )
    return entries


def describe_broker_configs(
    broker_config: BrokerConfig,
    include_synonyms: bool = False,
    include_docs: bool = False,
    names: Iterable[str] | None = None,
    *,
    cluster_default: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs for a BROKER resource. With cluster_default (resource name ""), only the dynamic
    cluster-wide defaults are described, as Kafka does."""
    cfg = broker_config
    pool = sorted(cfg._dynamic_default) if cluster_default else sorted(BROKER_CONFIG_DEFS)
    wanted = pool if names is None else [n for n in names if n in pool]
    entries: list[ConfigEntry] = []
    for name in wanted:
        d = BROKER_CONFIG_DEFS[name]
        value = cfg._dynamic_default[name] if cluster_default else cfg.raw(name)
        synonyms = _broker_synonyms_for(
            cfg, name, broker_config_synonyms(name), per_broker=not cluster_default
        )
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=name,
                value=None if d.sensitive else d.format(value),
                source=source,
                read_only=not d.dynamic,
                is_sensitive=d.sensitive,
                synonyms=synonyms if include_synonyms else [],
                config_type=d.type,
                documentation=d.doc if include_docs else None,
            )
        )
    return entries
