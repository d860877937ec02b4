"""Where fuzz workers keep hypothesis's example database: a directory, Redis, layers of both, or nowhere.

The database is a cache that lets shrinking and the target() Pareto front carry
over between rounds, workers and nights; the durable record of a bug is its
trace file in the corpus.  A ``--database`` value is one or more comma-separated
layers:

* ``DIR``: a directory, serving the workers of one machine (writes are atomic
  file creations);
* ``redis://HOST:PORT[/DB]``: a fleet's shared database through hypothesis's own
  :class:`~hypothesis.extra.redis.RedisExampleDatabase` (needs the ``redis`` extra);
* ``readonly:LAYER``: that layer, read but never written
  (:class:`~hypothesis.database.ReadOnlyDatabase`), so a developer replays what the
  fleet found without writing to the fleet's database;
* ``none``: no database.

Several layers form a :class:`~hypothesis.database.MultiplexedDatabase`: examples are
read from all of them, and saved to every writable one.  The usual developer set-up
is ``.hypothesis/poolfuzz,readonly:redis://fleet-db:6379/0``.

A Redis layer may carry a password (``redis://:secret@host:6379/0``,
``redis://user:secret@host/0`` or ``?password=secret``); whatever shows a spec to a
person or writes it down (the report, the progress line, the dashboard, these
errors) shows :func:`redacted` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from poolfuzz.harness.fuzz.outputs import OutputError, check_folder

DEFAULT_DATABASE = ".hypothesis/poolfuzz"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
READ_ONLY = "readonly:"
HIDDEN = "***"
PASSWORD_QUERY_KEY = "password"


class DatabaseError(ValueError):
    """A ``--database`` value that cannot be used here."""


def is_redis(spec: str) -> bool:
    return spec.startswith(REDIS_SCHEMES)


def redacted(spec: str) -> str:
    """``spec`` with the password of every Redis layer replaced by ``***``; everything else kept as written.

    A password is what redis-py's ``from_url`` authenticates with: the part of the
    user information after ``:`` (``redis://user:***@host``, ``redis://:***@host``)
    and a ``password`` query parameter.  A bare ``redis://name@host`` is a user
    name to redis-py and is kept.  Directory layers, ``none`` and text that is not
    a URL pass through unchanged, so this never fails on a spec :func:`layers` rejects.
    """
    parts = []
    for part in spec.split(","):
        layer = part.strip()
        if layer.startswith(READ_ONLY):
            layer = layer[len(READ_ONLY) :].strip()
        parts.append(part.replace(layer, _redacted_url(layer), 1) if is_redis(layer) else part)
    return ",".join(parts)


def _redacted_url(url: str) -> str:
    try:
        scheme, netloc, path, query, fragment = urlsplit(url)
    except ValueError:  # not a URL redis-py could open either; hide everything after the scheme
        return url[: url.index("://") + 3] + HIDDEN
    user_info, at, host = netloc.rpartition("@")
    user, colon, password = user_info.partition(":")
    if colon and password:
        netloc = f"{user}:{HIDDEN}{at}{host}"
    if query:
        query = "&".join(_hide_password_parameter(parameter) for parameter in query.split("&"))
    return urlunsplit((scheme, netloc, path, query, fragment))


def _hide_password_parameter(parameter: str) -> str:
    key = parameter.partition("=")[0]
    return f"{key}={HIDDEN}" if unquote_plus(key) == PASSWORD_QUERY_KEY else parameter


def layers(spec: str) -> list[tuple[str, bool]]:
    """``spec`` as ``(layer, read_only)`` pairs; ``[]`` for ``none``."""
    if spec.strip().lower() in ("", "none"):
        return []
    found = []
    for part in (p.strip() for p in spec.split(",")):
        read_only = part.startswith(READ_ONLY)
        layer = part[len(READ_ONLY) :].strip() if read_only else part
        if not layer or layer.lower() == "none":
            raise DatabaseError(f"--database {redacted(spec)}: empty or 'none' layer {redacted(part)!r} among several")
        found.append((layer, read_only))
    return found


def open_database(spec: str) -> Any:
    """The hypothesis ``ExampleDatabase`` named by ``spec``, or ``None`` for ``none``."""
    from hypothesis.database import MultiplexedDatabase, ReadOnlyDatabase

    opened = [ReadOnlyDatabase(_open_layer(layer)) if read_only else _open_layer(layer) for layer, read_only in layers(spec)]
    if not opened:
        return None
    return opened[0] if len(opened) == 1 else MultiplexedDatabase(*opened)


def _open_layer(spec: str) -> Any:
    if not is_redis(spec):
        from hypothesis.database import DirectoryBasedExampleDatabase

        return DirectoryBasedExampleDatabase(spec)
    try:
        import redis
    except ImportError:
        raise DatabaseError(f"--database {redacted(spec)}: the redis package is not installed (pip install 'poolfuzz[redis]')") from None
    from hypothesis.extra.redis import RedisExampleDatabase

    try:
        client = redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as exc:
        raise DatabaseError(f"--database {redacted(spec)}: {exc}") from None
    return RedisExampleDatabase(client)


def check_database(spec: str) -> None:
    """Open every layer of ``spec`` once in the parent, so a bad value is a usage error before any worker starts.

    A layer that looks like a URL must use a scheme redis-py opens (``bogus://x`` is not a folder
    named ``bogus:``); a directory layer must be a folder that exists or can be made and written.
    """
    for layer, _ in layers(spec):
        if "://" in layer and not is_redis(layer):
            scheme = layer.split("://", 1)[0]
            raise DatabaseError(
                f"--database {redacted(spec)}: unknown scheme {scheme + '://'!r}; a layer is a folder or one of {', '.join(REDIS_SCHEMES)}"
            )
        if not is_redis(layer):
            try:
                check_folder(Path(layer), "--database")
            except OutputError as exc:
                raise DatabaseError(str(exc)) from None
        database = _open_layer(layer)
        if not is_redis(layer):
            continue
        import redis

        try:
            database.redis.ping()
        except redis.exceptions.RedisError as exc:
            raise DatabaseError(f"--database {redacted(layer)}: cannot reach the server: {exc}") from None
