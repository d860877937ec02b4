"""A Redis password in ``--database`` never reaches the report, the progress line or an error message.

The fleet set-up (``docs/nightly.md``) passes the shared database as a URL, and a
Redis with ``requirepass`` puts the password in it.  Reports are copied to a
collector and rendered into a page anyone on the team opens, so every place that
records or prints the spec shows :func:`~poolfuzz.harness.fuzz.database.redacted` instead;
the workers still receive the spec as given (they must authenticate).
"""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from poolfuzz.harness.fuzz.database import DatabaseError, check_database, layers, redacted
from poolfuzz.harness.fuzz.options import FuzzOptions
from poolfuzz.harness.fuzz.run_report import opening_line
from poolfuzz.harness.fuzz.session import FuzzRun

SECRET = "s3cr3t-Pa55"
FLEET = f"readonly:redis://:{SECRET}@fleet-db:6379/0"
FLEET_SHOWN = "readonly:redis://:***@fleet-db:6379/0"


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        pytest.param(f"redis://:{SECRET}@fleet-db:6379/0", "redis://:***@fleet-db:6379/0", id="password-only"),
        pytest.param(f"redis://fuzz:{SECRET}@fleet-db:6379/0", "redis://fuzz:***@fleet-db:6379/0", id="user-and-password"),
        pytest.param(f"rediss://fuzz:{SECRET}@fleet-db/1", "rediss://fuzz:***@fleet-db/1", id="tls"),
        pytest.param(f"unix://:{SECRET}@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0", id="unix-socket"),
        pytest.param(
            f"redis://fleet-db:6379/0?password={SECRET}&socket_timeout=5",
            "redis://fleet-db:6379/0?password=***&socket_timeout=5",
            id="password-query-parameter",
        ),
        pytest.param("redis://:p%40ss@fleet-db:6379/0", "redis://:***@fleet-db:6379/0", id="percent-encoded-password"),
        pytest.param(f"redis://:{SECRET}@[::1", "redis://***", id="unparseable-url-is-hidden-whole"),
    ],
)
def test_the_password_of_a_redis_layer_is_replaced_and_the_rest_kept(spec: str, shown: str) -> None:
    assert redacted(spec) == shown


@pytest.mark.parametrize(
    "spec", [".hypothesis/poolfuzz", "none", "redis://fleet-db:6379/0", "redis://fuzz@fleet-db:6379/0", "", "/srv/db:with:colons@odd"]
)
def test_a_spec_without_a_password_is_left_exactly_as_written(spec: str) -> None:
    assert redacted(spec) == spec


def test_every_layer_of_a_comma_separated_spec_is_redacted_and_the_layers_stay_in_place() -> None:
    spec = f".hypothesis/poolfuzz, {FLEET},redis://fuzz:{SECRET}@backup:6380/2"
    shown = redacted(spec)
    assert SECRET not in shown
    assert shown == f".hypothesis/poolfuzz, {FLEET_SHOWN},redis://fuzz:***@backup:6380/2"
    assert [read_only for _, read_only in layers(shown)] == [read_only for _, read_only in layers(spec)]


def options(tmp_path: Path, database: str) -> FuzzOptions:
    return FuzzOptions(targets=[], seconds=1.0, workers=1, seed=7, database=database, logs=tmp_path / "logs")


def test_the_report_and_the_opening_progress_line_show_the_database_redacted(tmp_path: Path) -> None:
    chosen = options(tmp_path, f".hypothesis/poolfuzz,{FLEET}")
    report = FuzzRun(chosen, err=io.StringIO()).build_report().to_json()
    assert report["run"]["database"] == f".hypothesis/poolfuzz,{FLEET_SHOWN}"
    line = opening_line(chosen)
    assert line.endswith(f"database .hypothesis/poolfuzz,{FLEET_SHOWN}") and SECRET not in line
    assert chosen.database == f".hypothesis/poolfuzz,{FLEET}"  # the workers still get the spec they authenticate with


def test_a_bad_layer_error_names_the_spec_without_its_password() -> None:
    with pytest.raises(DatabaseError) as caught:
        layers(f"{FLEET},none")
    assert SECRET not in str(caught.value) and FLEET_SHOWN in str(caught.value)


def test_an_unreachable_server_error_names_the_layer_without_its_password() -> None:
    pytest.importorskip("redis", reason="the redis extra is not installed")
    with socket.socket() as probe:  # a port nothing listens on: connection refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DatabaseError, match="cannot reach the server") as caught:
        check_database(f"redis://fuzz:{SECRET}@127.0.0.1:{port}/0")
    assert SECRET not in str(caught.value) and f"redis://fuzz:***@127.0.0.1:{port}/0" in str(caught.value)
