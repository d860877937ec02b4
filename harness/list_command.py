"""``poolfuzz list``: the families (implementation in use, operations, invariants, upstream targets, what
they do not cover), the invariant catalogue and the page kernels; with ``--contracts`` the caller contract
of each upstream target.  Text for a reader, or ``--json`` for a script; a family that cannot be loaded is
listed with why, never a traceback.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["cmd_list", "describe_families"]


def describe_families(overrides: dict[str, str]) -> list[dict[str, Any]]:
    from poolfuzz.harness.judge.families import FAMILIES, family_unavailable, implementation_for, resolve
    from poolfuzz.harness.judge.plugins import PLUGGED_IN
    from poolfuzz.harness.machines.table import machine_class

    described = []
    for fam in FAMILIES.values():
        entry: dict[str, Any] = {
            "family": fam.name,
            "summary": fam.summary,
            "default": fam.default,
            "implementation": implementation_for(fam.name, overrides),
            "moves": fam.moves,
            "driver": fam.driver,
            "canaries": list(fam.canaries),
            "upstream": list(fam.upstream),
            "invariants": list(fam.invariants),
            "operations": [],
            "available": True,
            "problem": None,
            "plugin": PLUGGED_IN.get(fam.name, ""),
            "not_covered": list(fam.not_covered),
        }
        entry["overridden"] = entry["implementation"] != fam.default
        try:
            machine_class(fam.name)
            entry["operations"] = sorted(resolve(fam.driver).operations)
        except Exception as exc:  # noqa: BLE001 - listing must survive half-written families
            entry["available"], entry["problem"] = False, f"{type(exc).__name__}: {exc}"
        if entry["available"] and fam.default in fam.upstream and not entry["overridden"]:
            reason = family_unavailable(fam.name)  # an upstream default (engine) loads upstream to say
            if reason is not None:
                entry["available"], entry["problem"] = False, reason
        described.append(entry)
    return described


def cmd_list(args: argparse.Namespace) -> int:
    from poolfuzz.harness.judge.families import parse_overrides
    from poolfuzz.harness.judge.invariants import INVARIANTS
    from poolfuzz.harness.judge.plugins import PROBLEMS
    from poolfuzz.pools.page_alloc import KERNEL_NAMES, triton_available

    if args.contracts:
        return _list_contracts(as_json=args.json)
    families = describe_families(parse_overrides(args.target))
    kernels = {"kernels": list(KERNEL_NAMES), "triton_available": triton_available()}
    if args.json:
        print(
            json.dumps(
                {
                    "families": families,
                    "invariants": [{"id": i.id, "statement": i.statement, "guards_against": i.guards_against} for i in INVARIANTS.values()],
                    "page_alloc": kernels,
                    "plugin_problems": list(PROBLEMS),
                },
                indent=1,
            )
        )
        return 0
    print("families (implementation in use; 'override' marks a substitution):")
    for f in families:
        mark = "  override, default " + f["default"] if f["overridden"] else ""
        print(f"  {f['family']:22} {f['implementation']}{mark}")
        print(f"  {'':22} {f['summary']}")
        if f["available"]:
            print(f"  {'':22} operations: {', '.join(f['operations'])}")
            print(f"  {'':22} invariants: {', '.join(f['invariants'])}")
            if f["upstream"]:
                print(f"  {'':22} upstream:   {', '.join(f['upstream'])}")
            for line in f["not_covered"]:
                print(f"  {'':22} not covered: {line}")
        else:
            print(f"  {'':22} not available: {f['problem']}")
        if f["plugin"]:
            print(f"  {'':22} plug-in:    {f['plugin']}")
    for problem in PROBLEMS:
        print(f"  left out: {problem}")
    print("\ninvariants:")
    width = max(len(i) for i in INVARIANTS)
    for inv in INVARIANTS.values():
        print(f"  {inv.id:{width}}  {inv.statement}")
    triton = "available" if kernels["triton_available"] else "not available"
    print(f"\npage-alloc kernels: {', '.join(KERNEL_NAMES)} (triton {triton})")
    return 0


def _list_contracts(*, as_json: bool) -> int:
    from poolfuzz.harness.judge.contract import all_contracts

    contracts = all_contracts()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "target": c.target,
                        "release": c.release,
                        "reads": list(c.reads),
                        "rules": [
                            {
                                "op": r.op,
                                "calls": list(r.calls),
                                "shape": r.shape,
                                "narrowed": r.allows is not None,
                                "today": r.today is not None,
                                "instead": r.instead,
                                "callers": [str(cite) for cite in r.callers],
                            }
                            for r in c.rules
                        ],
                        "not_called": [{"op": n.op, "why": n.why} for n in c.not_called],
                    }
                    for c in contracts
                ],
                indent=1,
            )
        )
        return 0
    print("\n\n".join(c.describe() for c in contracts))
    return 0
