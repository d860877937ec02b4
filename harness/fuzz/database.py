"""Where fuzz workers keep hypothesis's example database: a directory, a Redis server, or nowhere.

The database is a cache that lets shrinking and the target() Pareto front carry
over between rounds, workers and nights; the durable record of a bug is its
trace file in the corpus.  A directory serves the workers of one machine
(writes are atomic file creations); ``redis://HOST:PORT[/DB]`` serves a fleet
through hypothesis's own :class:`~hypothesis.extra.redis.RedisExampleDatabase`
(needs the ``redis`` extra).  ``none`` runs without one.
"""

from __future__ import annotations

from typing import Any

DEFAULT_DATABASE = ".hypothesis/poolfuzz"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class DatabaseError(ValueError):
    """A ``--database`` value that cannot be used here."""


def is_redis(spec: str) -> bool:
    return spec.startswith(REDIS_SCHEMES)


def open_database(spec: str) -> Any:
    """The hypothesis ``ExampleDatabase`` named by ``spec``, or ``None`` for ``none``."""
    if spec.strip().lower() in ("", "none"):
        return None
    if not is_redis(spec):
        from hypothesis.database import DirectoryBasedExampleDatabase

        return DirectoryBasedExampleDatabase(spec)
    try:
        import redis
    except ImportError:
        raise DatabaseError(
            f"--database {spec}: the redis package is not installed (pip install 'poolfuzz[redis]')"
        ) from None
    from hypothesis.extra.redis import RedisExampleDatabase

    try:
        client = redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as exc:
        raise DatabaseError(f"--database {spec}: {exc}") from None
    return RedisExampleDatabase(client)


def check_database(spec: str) -> None:
    """Open ``spec`` once in the parent, so a bad value is a usage error before any worker starts."""
    database = open_database(spec)
    if database is None or not is_redis(spec):
        return
    import redis

    try:
        database.redis.ping()
    except redis.exceptions.RedisError as exc:
        raise DatabaseError(f"--database {spec}: cannot reach the server: {exc}") from None
