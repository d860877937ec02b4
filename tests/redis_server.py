"""A throwaway ``redis-server``, for the tests whose fuzz runs share examples through a redis database.

``tests/test_fuzz.py`` (the workers write what they find to it) and ``tests/test_fleet.py`` (machines
replay each other's finds) start the same server the same way; it is written once here.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 10.0


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def throwaway_redis(folder: Path) -> Iterator[str]:
    """A ``redis-server`` on loopback, without persistence, its files in ``folder``: yields its URL once it
    answers a ping, and stops it on the way out.

    Skips the test without the ``redis-server`` binary or the ``redis`` package; fails it when the server does
    not answer within :data:`START_TIMEOUT_S` or exits first.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary on PATH (apt-get install redis-server)")
    redis = pytest.importorskip("redis", reason="the redis package is missing (pip install 'poolfuzz[redis]')")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(f"redis-server on port {port} did not come up within {START_TIMEOUT_S:g} s")
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
