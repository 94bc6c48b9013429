"""Argument parsing of the consumer-groups command (the cluster side is in tests/integration)."""

from __future__ import annotations

import datetime as dt
import io

import pytest

from broker_runtime.tools.consumer_groups import UsageError, main, parse_datetime, parse_duration_ms


def test_datetimes_in_kafkas_formats() -> None:
    utc = int(dt.datetime(2024, 3, 1, 12, 30, 15, 250000, tzinfo=dt.UTC).timestamp() * 1000)
    assert parse_datetime("2024-03-01T12:30:15.250Z") == utc
    assert parse_datetime("2024-03-01T13:30:15.250+01:00") == utc
    assert parse_datetime("2024-03-01T07:30:15.250-0500") == utc
    assert parse_datetime("2024-03-01T12:30:15Z") == utc - 250
    local = dt.datetime(2024, 3, 1, 12, 30, 15, 250000).astimezone()
    assert parse_datetime("2024-03-01T12:30:15.250") == int(local.timestamp() * 1000)
    with pytest.raises(UsageError):
        parse_datetime("yesterday")


def test_iso_durations() -> None:
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == 86_400_000 + 7_200_000 + 180_000 + 4_500
    assert parse_duration_ms("PT0.001S") == 1
    for bad in ("P", "PT", "1H", "P1Y", "PT1H2"):
        with pytest.raises(UsageError):
            parse_duration_ms(bad)


def test_exactly_one_action_is_required() -> None:
    err = io.StringIO()
    assert main(["--bootstrap-server", "127.0.0.1:1"], out=io.StringIO(), err=err) == 1
    assert "exactly one action" in err.getvalue()
    err = io.StringIO()
    assert main(["--bootstrap-server", "127.0.0.1:1", "--list", "--delete"], out=io.StringIO(), err=err) == 1
