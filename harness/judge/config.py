"""A family's pool configuration, typed: one frozen dataclass per family, checked once, when it is built.

Before these classes a configuration was a ``dict[str, Any]`` read four ways on its way down
(``config["page_size"]``, ``config.get("page_size", 1)``, ``int(config.get(...) or 1)``), with
``device`` stripped and re-added by each engine; a misspelt key was a ``KeyError`` deep in a
driver, or silently a pool default.  A :class:`PoolConfig` subclass names every key its family's
constructor takes, with its type and (:func:`bounded`) its size limit beside it, so

- :meth:`PoolConfig.limits` *is* the family's :class:`~poolfuzz.harness.judge.limits.FamilyLimits` row:
  the bounds a trace's config is refused against are the fields' own, never a second table;
- building one (from a trace's JSON with :meth:`PoolConfig.from_mapping`, or in code) checks
  every field's type and bound and raises :class:`~poolfuzz.harness.judge.limits.LimitError` naming the
  field, before any pool is built;
- :attr:`PoolConfig.device` and :attr:`PoolConfig.tokens_per_page` are read here and nowhere else.

A config remembers which keys it was given (:meth:`to_json`), so a trace's config round-trips
byte for byte and a substitute target (an upstream class) is called with exactly the keyword
arguments it was called with before: a key left out stays the target's own default.

A kit that declares no class (a plug-in written against a bare ``FamilyLimits``) gets one
generated from its row (:func:`untyped_config`), which also reads as a mapping.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, TypeVar

from poolfuzz.harness.judge.limits import SETTING, FamilyLimits, Footprint, Limit, LimitError, check_config

C = TypeVar("C", bound="PoolConfig")
B = TypeVar("B", bound=Callable[..., Any])

_LIMIT = "poolfuzz.limit"
_GIVEN = "_given"


def bounded(low: int, high: int, *, default: Any = MISSING, nullable: bool = False, dims: int = 0) -> Any:
    """A field that sizes an allocation: an integer (or, ``dims`` > 0, a shape) ``low..high``."""
    return field(default=default, metadata={_LIMIT: Limit(low, high, nullable, dims)})


def setting(default: Any = MISSING) -> Any:
    """A field that sizes nothing (a flag, a kernel name): its type is checked, it has no bound."""
    return field(default=default, metadata={_LIMIT: SETTING})


class _RecordsGiven(type):
    """Records which keywords built a config (its ``_given``), as a dict would hold only the keys written."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        built = super().__call__(*args, **kwargs)
        if _GIVEN not in kwargs:
            object.__setattr__(built, _GIVEN, tuple(dict.fromkeys((*kwargs, "device"))))
        return built


@dataclass(frozen=True, kw_only=True)
class PoolConfig(metaclass=_RecordsGiven):
    """The base of every family's configuration: ``device``, and the machinery of the subclasses.

    A subclass is a ``@dataclass(frozen=True, kw_only=True)`` whose fields are made with
    :func:`bounded` or :func:`setting`; ``family`` names it in errors and ``footprints``
    bounds what several fields allocate together.
    """

    family: ClassVar[str] = ""
    footprints: ClassVar[tuple[Footprint, ...]] = ()
    takes_device: ClassVar[bool] = True
    """Whether the family's constructor takes ``device`` (:meth:`kwargs`); a trace records it either way."""

    device: str = setting("cpu")
    """Where the pool's tensors live; every engine sets it the same way (:meth:`on_device`)."""
    _given: tuple[str, ...] = field(default=(), compare=False, repr=False, metadata={_LIMIT: None})

    def __post_init__(self) -> None:
        cls = type(self)
        for name, hint in _hints(cls).items():
            value = getattr(self, name)
            if not _conforms(value, hint):
                raise LimitError(cls.family, f"config.{name}", value, None, f"= {value!r} must be {_spoken(hint)} (a {cls.__name__} field)")
        check_config(cls.family, self.to_json(everything=True), cls.limits())

    # ------------------------------------------------------------- building
    @classmethod
    def from_mapping(cls: type[C], config: Mapping[str, object]) -> C:
        """The config a trace (or a command line) spells as JSON; :class:`LimitError` names the first bad field.

        Keys the class does not know, values of the wrong type and sizes past the limits are all
        refused here, before any pool is built.
        """
        check_config(cls.family, config, cls.limits())
        names = {f.name: f for f in _fields(cls)}
        missing = [name for name, f in names.items() if f.default is MISSING and name not in config]
        if missing:
            raise LimitError(cls.family, f"config.{missing[0]}", None, None, f"is missing: a {cls.__name__} needs {', '.join(missing)}")
        values = {key: tuple(value) if isinstance(value, list) else value for key, value in config.items()}
        built = cls(**values, _given=tuple(dict.fromkeys((*config, "device"))))  # type: ignore[arg-type]
        return built

    def replaced(self: C, **changes: Any) -> C:
        """A copy with ``changes``; the keys it was given stay given, and the changed ones join them."""
        given = tuple(dict.fromkeys((*self._given, *changes)))
        return dataclasses.replace(self, **changes, _given=given)

    def on_device(self: C, device: str) -> C:
        """This config on ``device`` (the one way every engine, replay and machine sets it)."""
        return self if device == self.device else self.replaced(device=device)

    # -------------------------------------------------------------- reading
    @property
    def tokens_per_page(self) -> int:
        """The family's page size in tokens: its ``page_size`` field, or 1 for a family with none."""
        return int(getattr(self, "page_size", 1) or 1)

    def to_json(self, *, everything: bool = False) -> dict[str, Any]:
        """The config as a trace records it: the keys it was given, in their order (``everything``: all fields)."""
        names = [f.name for f in _fields(type(self))] if everything else self._given
        return {name: _plain(getattr(self, name)) for name in names}

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the family's pool constructor: exactly the keys it was given (``device``
        only where the constructor takes one)."""
        given = self.to_json()
        if not self.takes_device:
            given.pop("device", None)
        return given

    @classmethod
    def limits(cls) -> FamilyLimits:
        """The family's size limits, from the fields (:func:`bounded`) and ``footprints``; built once per class."""
        row = _ROWS.get(cls)
        if row is None:
            fields = sorted(_fields(cls), key=lambda f: f.name == "device")  # device last, as configs write it
            config = {f.name: f.metadata[_LIMIT] for f in fields}
            row = _ROWS[cls] = FamilyLimits(config, cls.footprints, typed=cls)
        return row

    @classmethod
    def with_args(cls, args: Mapping[str, int]) -> FamilyLimits:
        """:meth:`limits` with the bounds of the step arguments that size a call (``op.arg``): a kit's
        ``Family(limits=...)``."""
        row = cls.limits()
        return FamilyLimits(row.config, row.footprints, dict(args), typed=cls)


_ROWS: dict[type[PoolConfig], FamilyLimits] = {}


def _fields(cls: type[PoolConfig]) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.name != _GIVEN)


def _hints(cls: type[PoolConfig]) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _HINTS[cls] = {f.name: hints[f.name] for f in _fields(cls)}
    return found


_HINTS: dict[type[PoolConfig], dict[str, Any]] = {}


def _conforms(value: object, hint: Any) -> bool:
    """Whether ``value`` is of the field type ``hint`` (the few shapes config fields take)."""
    if hint is Any:
        return True
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_conforms(v, item) for v in value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _spoken(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_spoken(arm) for arm in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {_spoken(typing.get_args(hint)[0])}"
    return {type(None): "null", int: "an integer", bool: "true or false", str: "a string", float: "a number"}.get(hint, str(hint))


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


# ------------------------------------------------------------- plug-in kits
@dataclass(frozen=True, kw_only=True)
class UntypedConfig(PoolConfig):
    """A config generated from a bare limits row: every key optional, of any type, and readable as a mapping."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._given:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._given else default

    def __contains__(self, key: object) -> bool:
        return key in self._given


_UNTYPED: dict[str, type[UntypedConfig]] = {}


def untyped_config(family: str, row: FamilyLimits) -> type[UntypedConfig]:
    """The config class of a family whose kit declares none: one ``Any`` field per key of ``row``, default ``None``."""
    made = _UNTYPED.get(family)
    if made is None:
        fields = [(key, Any, field(default=None, metadata={_LIMIT: limit})) for key, limit in row.config.items() if key != "device"]
        made = dataclasses.make_dataclass(
            f"UntypedConfig[{family}]", fields, bases=(UntypedConfig,), frozen=True, kw_only=True, namespace={"family": family}
        )
        _ROWS[made] = FamilyLimits({"device": SETTING, **row.config}, row.footprints, row.args)
        _UNTYPED[family] = made
    return made


def config_class(family: str, row: FamilyLimits) -> type[PoolConfig]:
    """The class a config of ``family`` is built as: its kit's, or one generated from its limits row."""
    if row.typed is None:
        return untyped_config(family, row)
    assert issubclass(row.typed, PoolConfig), f"{family}'s limits name {row.typed!r}, not a PoolConfig"
    return row.typed


def takes_config(config_class: type[PoolConfig]) -> Callable[[B], B]:
    """Give a target builder that takes ``**shape`` the fields of ``config_class`` as its keyword-only signature.

    The config is the one declaration of a server shape: the registry binds a target's signature to the family's
    config, and the trace loader checks a trace's config keys and types against the default target's, so a builder that
    spelled its keywords out would be a second declaration to keep in step (and a field added to one but not the other
    would fail only at a call).
    """
    hints = typing.get_type_hints(config_class)
    fields = [f for f in dataclasses.fields(config_class) if not f.name.startswith("_")]
    parameters = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]) for f in fields]

    def bind(builder: B) -> B:
        returns = builder.__annotations__.get("return", Any)
        builder.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
        builder.__annotations__ = {**{f.name: hints[f.name] for f in fields}, "return": returns}
        return builder

    return bind
