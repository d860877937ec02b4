"""Caller contracts: the calls an upstream class's own callers make, which are the only valid calls it gets.

Upstream SGLang and vLLM validate none of their input, so a target that does not
(``poolfuzz_check_misuse = False``) is fuzzed with valid calls only.  "Valid" must mean
*what upstream's callers send*, not what our pools accept: our ``swa_kv`` driver once sent
``free`` after ``free_swa`` at page size 1, which our pool allows and upstream's callers
never do (they send ``free_full``), and reported the driver's own misuse as an upstream
finding.  A :class:`Contract` states, per driver operation, the upstream methods it calls,
the argument shapes the callers send, and the upstream lines (:class:`Cite`) that send them.

The driver consults it on every step (:meth:`Contract.judge`), whose predicates read the contract's
*view* of the driver (:attr:`Contract.view`, a typed :class:`~poolfuzz.harness.judge.view.DriverView` of the
kit, never the driver itself): an operation the contract
does not list, or one whose arguments its rule's ``allows`` refuses in the current state
(the class itself forbids them), is skipped (not issued, not recorded), so a call upstream
never accepts is never issued as a valid one.  A step the class accepts but this release's
callers do not send (``today``) is issued and noted, so a
finding through it is classified *latent* and names that step, instead of being hidden.  The citations are checked against the installed upstream files by
``tests/test_contracts.py``, and a recording proxy there checks that each operation calls
only the methods its rule names, so a table cannot drift from the code it describes.

A target declares its contract with the class attribute ``poolfuzz_contract =
"module:ATTR"``; a target without one (our own pools, a plug-in) is unconstrained.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar

from poolfuzz.harness.judge.moved import current_module
from poolfuzz.harness.judge.ops import Operations
from poolfuzz.harness.judge.trace import Args

S = TypeVar("S")
"""A contract's view type: what its predicates read of the driver."""
S_contra = TypeVar("S_contra", contravariant=True)
"""A rule's view type: a rule whose predicates read less (only the arguments: ``object``) serves any contract."""


class ContractError(ValueError):
    """A contract table that cannot be used: an attribute that does not resolve, or an operation listed twice."""


@dataclass(frozen=True)
class Cite:
    """One upstream line: ``path`` (under the package folder, e.g. ``srt/mem_cache/common.py``) and ``line``
    hold ``text``, the call or expectation as upstream spells it (checked within two lines either side)."""

    path: str
    line: int
    text: str
    package: str = "sglang"
    note: str = ""

    def __str__(self) -> str:
        return f"{self.package}/{self.path}:{self.line} `{self.text}`" + (f" ({self.note})" if self.note else "")


Allows = Callable[[S_contra, Args], bool]
"""``allows(view, args)``: whether upstream's callers send this operation these arguments in the state the
contract's view reads (``Allows[SWAContractView]``; a predicate of the arguments alone takes ``object``)."""


@dataclass(frozen=True)
class CallRule(Generic[S_contra]):
    """Driver operation ``op`` calls the upstream methods ``calls`` with arguments of ``shape``; ``callers``
    are the upstream lines that make those calls.

    Two predicates narrow it, and they differ in what a finding means:

    * ``allows``: what the class itself forbids (an ``assert`` or ``expect`` in the callee, a
      precondition its docstring states).  A step it refuses is never issued: a failure after
      it would be the driver's misuse, a false finding.
    * ``today``: what the callers of this release happen to send (page sizes, states, orders
      they never reach).  A step it refuses is still issued, because the class's own contract
      allows it, and it is recorded as *off the callers' path* with ``instead`` (what the
      callers do, with the line): a finding through it is a latent defect of the class, and
      its classification names the step.
    """

    op: str
    calls: tuple[str, ...]
    shape: str
    callers: tuple[Cite, ...]
    allows: Allows[S_contra] | None = None
    today: Allows[S_contra] | None = None
    instead: str = ""


CONSTRUCT_MISUSE = "misuse: a malformed constructor"
"""Why no contract's target is sent ``construct`` (every driver's malformed constructor): a contract with declared
operations lists it so, last, unless it says otherwise."""


@dataclass(frozen=True)
class NotCalled:
    """Driver operation ``op`` is never issued to this target: ``why`` says which caller behaviour it lacks."""

    op: str
    why: str


def _the_driver(driver: Any) -> Any:
    return driver


@dataclass(frozen=True)
class Contract(Generic[S]):
    """What ``target``'s callers in ``release`` send it: one rule per operation, and the operations they never make.

    Generic in its view type ``S``: ``view(driver)`` builds what every predicate of its rules reads (the kit's
    typed view class, e.g. :class:`~poolfuzz.harness.kits.kv.contract_view.KVContractView`), so mypy checks each
    predicate's reads against it; a table that names none (a plug-in's) gets the driver itself."""

    target: str
    release: str
    rules: tuple[CallRule[S], ...]
    not_called: tuple[NotCalled, ...] = ()
    reads: tuple[str, ...] = ()
    """Upstream methods that only answer a question (``available_size``): the audits may call them after any step."""
    upstream_attr: str = "inner"
    """The wrapper's attribute holding the upstream object, whose method calls are this table's ``calls``."""
    view: Callable[[Any], S] = _the_driver
    """What the predicates read, built from the driver when a step's rule has a predicate."""
    by_op: dict[str, CallRule[S]] = field(init=False, repr=False, compare=False)

    ops: type[Operations] | None = None
    """The driver's declared operations (its kit's ``ops`` module): the table must name each of them, and only them,
    or it is refused as it is built (``construct``, unless listed, is added to ``not_called``: :data:`CONSTRUCT_MISUSE`)."""

    def __post_init__(self) -> None:
        ops = [rule.op for rule in self.rules] + [entry.op for entry in self.not_called]
        repeated = sorted({op for op in ops if ops.count(op) > 1})
        if repeated:
            raise ContractError(f"{self.target}'s contract lists {repeated} more than once")
        if self.ops is not None and Operations.construct not in ops:  # every driver has it; no upstream caller sends it
            object.__setattr__(self, "not_called", (*self.not_called, NotCalled(Operations.construct, CONSTRUCT_MISUSE)))
            ops.append(Operations.construct)
        if self.ops is not None:
            self.ops.check_named(f"{self.target}'s contract", ops)
            missing = sorted(self.ops.names() - set(ops))
            if missing:
                raise ContractError(f"{self.target}'s contract does not name {missing}, which {self.ops.__name__} declares")
        object.__setattr__(self, "by_op", {rule.op: rule for rule in self.rules})

    def judge(self, driver: Any, op: str, args: Args) -> str | None:
        """``None`` when ``op`` with ``args`` is not to be issued in the driver's current state (not listed, or the
        class forbids it); else ``""`` when this release's callers send it, or why they do not (off their path)."""
        rule = self.by_op.get(op)
        if rule is None:
            return None
        if rule.allows is None and rule.today is None:
            return ""
        view = self.view(driver)
        if rule.allows is not None and not rule.allows(view, args):
            return None
        if rule.today is None or rule.today(view, args):
            return ""
        return rule.instead or f"{op} with these arguments in this state is not sent by the callers of {self.release}"

    def allows(self, driver: Any, op: str, args: Args) -> bool:
        """Whether ``op`` with ``args`` may be issued in the driver's current state."""
        return self.judge(driver, op, args) is not None

    def describe(self) -> str:
        """The table as text, for the docs and ``list --contracts``: each operation, its calls, shape and callers."""
        lines = [f"{self.target} ({self.release}): the calls its callers make"]
        for rule in self.rules:
            narrowed = " (narrowed)" if rule.allows is not None else ""
            lines.append(f"  {rule.op}: {', '.join(rule.calls) or '(no upstream call)'}; {rule.shape}{narrowed}")
            lines.extend(f"      {cite}" for cite in rule.callers)
            if rule.today is not None:
                lines.append(f"      off the callers' path (issued, a finding through it is latent): {rule.instead}")
        for entry in self.not_called:
            lines.append(f"  {entry.op}: never issued ({entry.why})")
        return "\n".join(lines)


@dataclass(frozen=True)
class KnownFindingFilter(Generic[S]):
    """The calls that reach a family's known upstream findings (:mod:`poolfuzz.harness.upstream.findings`): per operation,
    when a machine may still issue it, a predicate over ``view(driver)`` as a contract's predicates read it.

    A family names its filter in its kit's declaration (``Family.known_findings``);
    :func:`~poolfuzz.harness.upstream.findings.machine_avoiding_known_findings` withholds every call it refuses, so the
    state space behind a known finding is still fuzzed."""

    view: Callable[[Any], S]
    keep: tuple[tuple[str, Allows[S]], ...]
    """``(operation, when the machine may still issue it)``, one entry per operation that can reach a finding."""
    ops: type[Operations] | None = None
    """The driver's declared operations: an entry naming another is refused as the filter is built."""

    def __post_init__(self) -> None:
        if self.ops is not None:
            self.ops.check_named(f"known-finding filter over {getattr(self.view, '__name__', self.view)}", (name for name, _ in self.keep))

    def allows(self, driver: Any, op: str, args: Args) -> bool:
        """Whether ``op`` with ``args`` may still be issued in the driver's current state."""
        return all(allowed(self.view(driver), args) for name, allowed in self.keep if name == op)


@cache
def _resolve(spec: str) -> Contract[Any]:
    module, _, attr = spec.partition(":")
    try:
        contract = getattr(importlib.import_module(current_module(module)), attr)
    except (ImportError, AttributeError) as exc:
        raise ContractError(f"poolfuzz_contract {spec!r} does not resolve: {exc}") from exc
    if not isinstance(contract, Contract):
        raise ContractError(f"poolfuzz_contract {spec!r} is a {type(contract).__name__}, not a Contract")
    return contract


def all_contracts(packages: Sequence[str] | None = None) -> list[Contract[Any]]:
    """Every ``CONTRACT`` of the modules of ``packages`` (default: the ``contracts`` package of each of our kits,
    where its upstream targets' tables live), ordered by module name (importable without upstream installed)."""
    import pkgutil

    if packages is None:
        from poolfuzz.harness.judge.families import KITS

        packages = [f"{kit}.contracts" for kit in KITS]
    modules: list[tuple[str, str]] = []
    for package in packages:
        try:
            root = importlib.import_module(package)
        except ModuleNotFoundError as exc:
            if exc.name != package:
                raise
            continue  # a kit with no upstream target has no tables
        modules += [(info.name, f"{package}.{info.name}") for info in pkgutil.iter_modules(root.__path__) if not info.name.startswith("_")]
    found = []
    for _, module in sorted(modules):
        contract = getattr(importlib.import_module(module), "CONTRACT", None)
        if isinstance(contract, Contract):
            found.append(contract)
    return found


def contract_of(factory: Any) -> Contract[Any] | None:
    """The caller contract ``factory`` declares (``poolfuzz_contract``), or ``None`` for an unconstrained target."""
    spec = getattr(factory, "poolfuzz_contract", None)
    if spec is None:
        return None
    return spec if isinstance(spec, Contract) else _resolve(str(spec))
