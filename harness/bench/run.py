"""``poolfuzz bench``: the performance claims of the pools and the harness, measured side by side.

Every ratio compares two things timed in the same run, interleaved round by
round and reduced with best-of-N, so a busy machine slows both sides alike.
The tables go to stdout and to ``docs/benchmarks.md`` with the machine
described; each target is marked met or missed, and a miss says why.
A CUDA section (``torch.cuda.Event`` timing after warm-up) runs when a GPU is
present and is skipped with a note otherwise.  ``--quick`` (under 30 s) is for
smoke runs; its numbers are noisier, and it leaves out the sections of
:mod:`poolfuzz.harness.bench.detect` (time to detect every canary, the fuzzing routes),
which take minutes.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter

import torch

from poolfuzz.harness.bench.baselines import HeadSliceReqToTokenPool, extend_inputs, extend_per_request_torch
from poolfuzz.harness.bench.detect import bench_routes, bench_time_to_detect
from poolfuzz.harness.bench.timing import Budget, Section, compare, fmt_ratio, fmt_us, machine_description, to_markdown, to_text, verdict
from poolfuzz.harness.bench.versus_upstream import bench_versus_upstream
from poolfuzz.harness.bench.workloads import checked_and_bare, workloads
from poolfuzz.harness.helptext import prog, summary
from poolfuzz.harness.kits.prefix_cache.bench import bench_prefix_cache
from poolfuzz.pools.mamba import MambaSlotAllocator
from poolfuzz.pools.page_alloc import get_kernel, triton_available
from poolfuzz.pools.req_to_token import ReqToTokenPool

DOC = Path("docs/benchmarks.md")
SCALING_HEADER = "## Fuzz worker scaling"


# ------------------------------------------------------------- request rows
def _row_pool(cls: type[ReqToTokenPool], size: int, free: int) -> ReqToTokenPool:
    pool = cls(size, 1)
    pool.alloc_rows(size - free)
    return pool


def _alloc_only(pool: ReqToTokenPool, need: int, budget: Budget, block: int = 10) -> float:
    """Best seconds per ``alloc_rows(need)`` call, timed in blocks whose rows are freed untimed.

    Seed 000 timed the scheduler's ``alloc`` alone; freeing between blocks keeps
    the free-list length within ``block * need`` rows of where it started.
    """
    best = float("inf")
    deadline = perf_counter() + budget.seconds / 3
    while perf_counter() < deadline:
        taken: list[int] = []
        start = perf_counter()
        for _ in range(block):
            rows = pool.alloc_rows(need)
            assert rows is not None, "the benchmark pools never run short"
            taken += rows
        best = min(best, (perf_counter() - start) / block)
        pool.free_rows(taken)
    return best


def bench_rows(budget: Budget) -> Section:
    section = Section(
        "ReqToTokenPool.alloc_rows alone (microseconds per call)",
        [
            "rows",
            "tail pop, 14,745/16,384 free",
            "tail pop, 58/64 free",
            "head slice, 14,745/16,384 free",
            "16,384 vs 64 slots",
            "head slice / tail pop",
        ],
    )
    worst_size, worst_head = 0.0, float("inf")
    for need in (1, 2, 3, 4):
        big, small = _row_pool(ReqToTokenPool, 16_384, 14_745), _row_pool(ReqToTokenPool, 64, 58)
        head = _row_pool(HeadSliceReqToTokenPool, 16_384, 14_745)
        t = {name: _alloc_only(pool, need, budget) for name, pool in (("big", big), ("small", small), ("head", head))}
        size_ratio, head_ratio = t["big"] / t["small"], t["head"] / t["big"]
        worst_size, worst_head = max(worst_size, size_ratio), min(worst_head, head_ratio)
        section.rows.append(
            [str(need), fmt_us(t["big"]), fmt_us(t["small"]), fmt_us(t["head"]), fmt_ratio(size_ratio), fmt_ratio(head_ratio)]
        )
    # Where the time goes: the free-list work alone, and the generation counter update.
    free_list = list(range(1, 14_746))
    generation = torch.zeros(16_385, dtype=torch.int64).numpy()

    def tail_only() -> None:
        rows = free_list[-4:]
        del free_list[-4:]
        free_list.extend(rows)

    def head_only() -> None:
        nonlocal free_list
        rows = free_list[:4]
        free_list = free_list[4:]
        free_list.extend(rows)

    def bump() -> None:
        for row in (5, 6, 7, 8):
            generation[row] += 1

    parts = compare({"tail": tail_only, "head": head_only, "gen": bump}, budget)
    section.notes.append(
        f"Target: 16,384-slot pool at most 1.5x the 64-slot pool: worst {fmt_ratio(worst_size)}, {verdict(worst_size <= 1.5)}."
    )
    section.notes.append(
        f"Target: tail pop at least 8x faster than the head slice (seed 000 measured 10.5x): "
        f"worst {fmt_ratio(worst_head)}, {verdict(worst_head >= 8)}."
    )
    section.notes.append(
        f"Breakdown at 4 rows: the free-list work alone costs {fmt_us(parts['tail'])} us (tail pop) vs "
        f"{fmt_us(parts['head'])} us (head slice), {fmt_ratio(parts['head'] / parts['tail'])}; bumping four generations "
        f"through the numpy view of `req_generation` (scalar updates, as `alloc_rows` does for small batches) costs {fmt_us(parts['gen'])} us, and the free-membership "
        "table and argument checks the rest."
    )
    if worst_head < 8:
        section.notes.append(
            "Why the 8x target is missed: both variants pay the same fixed costs per call (generation bump, "
            "membership table, argument checks), and on this CPU the head slice's copy of ~14,700 pointers is "
            "cheaper than on the machine seed 000 measured (32 us there), so the fixed part weighs more."
        )
    return section


# ------------------------------------------------------------- extend kernels
def _extend_call(kernel: str, inputs: tuple[torch.Tensor, ...], ps: int) -> Callable[[], None]:
    extend = get_kernel(kernel).extend
    pre, seq, last, pages, out = inputs
    return lambda: extend(pre, seq, last, pages, out, ps)


def bench_extend(budget: Budget, quick: bool) -> Section:
    ps = 16
    kernels = ["loop", "vectorized"] + (["triton"] if triton_available() else [])
    columns = ["per-request torch", *kernels]
    header = ["batch", "tokens"] + [f"{k} (us)" for k in columns] + ["vectorized vs per-request", "vectorized vs oracle"]
    if "triton" in kernels:
        header.append("triton vs oracle (interpreter)")
    section = Section(f"Extend index computation, page size {ps} (microseconds per batch)", header)
    speedups: dict[int, float] = {}
    for bs in (1, 8, 64, 256):
        inputs = extend_inputs(bs, ps, seed=bs)
        fns: dict[str, Callable[[], None]] = {
            k: _extend_call(k, inputs, ps) for k in kernels if k != "triton" or bs <= (8 if quick else 64)
        }
        pre, seq, last, pages, out = inputs
        fns["per-request torch"] = lambda: extend_per_request_torch(pre, seq, last, pages, out, ps)  # noqa: B023
        t = compare(fns, budget if "triton" not in fns else Budget(budget.seconds, 3))
        speedups[bs] = t["per-request torch"] / t["vectorized"]
        row = [str(bs), str(inputs[4].numel())] + [fmt_us(t[k]) if k in t else "-" for k in columns]
        row += [fmt_ratio(speedups[bs]), fmt_ratio(t["loop"] / t["vectorized"])]
        if "triton" in kernels:
            row.append(fmt_ratio(t["loop"] / t["triton"]) if "triton" in t else "-")
        section.rows.append(row)
    section.notes.append(
        f"Target: vectorized at least 4x the per-request loop at batch 64: {fmt_ratio(speedups[64])}, {verdict(speedups[64] >= 4)}."
    )
    section.notes.append(
        f"Target: vectorized no worse than 0.8x the per-request loop at batch 1: {fmt_ratio(speedups[1])}, {verdict(speedups[1] >= 0.8)}."
    )
    if speedups[1] < 0.8:
        section.notes.append(
            "Why batch 1 misses on this machine: the vectorized path is about twenty whole-batch torch ops "
            "whatever the batch size, a few microseconds of dispatch each on CPU, while the per-request loop on CPU "
            "tensors reads its scalars for free.  Seed 002's 0.84-0.94x was measured on CUDA, where each of the "
            "loop's scalar reads is a device sync; the CUDA section is where that comparison belongs."
        )
    section.notes.append(
        "The per-request column is the shape of loop seed 002 replaced (scalar reads and torch slices per "
        "request; each read is a device sync on CUDA), and the targets are stated against it.  The `loop` "
        "column is our oracle, a per-token pure-Python loop over host lists: on CPU it has no torch dispatch "
        "at all, so for one small request it is faster than any batch of torch ops, and the vectorized path "
        "only overtakes it as batches grow.  On CUDA the oracle would need a host copy of every input."
    )
    if "triton" in kernels:
        section.notes.append(
            "The triton column runs the Triton *interpreter* on CPU tensors (numpy emulation of "
            "each program): a correctness path, not a performance one.  Compiled timings are "
            "in the CUDA section."
        )
    else:
        section.notes.append("triton is not installed: no triton column.")
    return section


# --------------------------------------------------------------- Mamba slots
def _admission(grouped: bool, n: int, device: str = "cpu") -> Callable[[], None]:
    allocator = MambaSlotAllocator(4 * n, device)

    def admit() -> None:
        allocator.clear()
        if grouped:
            allocator.alloc_group_begin(n)
        for _ in range(n):
            allocator.alloc(1)
        if grouped:
            allocator.alloc_group_end()

    return admit


def bench_mamba(budget: Budget) -> Section:
    n = 256
    reset = MambaSlotAllocator(4 * n)
    t = compare({"grouped": _admission(True, n), "single": _admission(False, n), "clear": reset.clear}, budget)
    grouped, single = t["grouped"] - t["clear"], t["single"] - t["clear"]
    section = Section(
        f"Mamba admission of {n} requests (microseconds per round, clear() subtracted)",
        ["grouped window", "per-request alloc(1)", "speed-up"],
        [[fmt_us(grouped), fmt_us(single), fmt_ratio(single / grouped)]],
    )
    section.notes.append("No numeric target; seed 001 claims the grouped window cuts per-request bookkeeping.")
    return section


# ------------------------------------------------------------ harness speed
def bench_harness(budget: Budget, quick: bool) -> Section:
    runs, steps = (1, 20) if budget.smoke else (4, 100) if quick else (10, 200)
    section = Section(
        f"Harness throughput: driver steps without hypothesis ({runs} seeded runs of {steps} steps)",
        ["family", "steps", "checked steps/s", "bare pool calls/s", "checking overhead", "overhead, audits at teardown only"],
    )
    worst = 0.0
    rounds = max(2, budget.rounds // 2)
    for family, (workload, _) in workloads().items():
        measured = checked_and_bare(family, workload, runs=runs, steps=steps, rounds=rounds)
        if isinstance(measured, str):
            section.rows.append([family, "-", "-", "-", measured, "-"])
            continue
        n, checked, bare, calls = measured
        lazy = checked_and_bare(family, workload, runs=runs, steps=steps, rounds=rounds, audit_period=10**9)
        lazy_ratio = fmt_ratio(lazy[1] / lazy[2]) if not isinstance(lazy, str) else "-"
        worst = max(worst, checked / bare)
        section.rows.append([family, str(n), f"{n / checked:,.0f}", f"{calls / bare:,.0f}", fmt_ratio(checked / bare), lazy_ratio])
    section.notes.append(
        f"Target: checking overhead at most 3x the same pool calls unchecked: worst {fmt_ratio(worst)}, {verdict(worst <= 3)}."
    )
    section.notes.append(
        "Checked = replaying the recorded driver steps through a fresh driver (model updates, per-call checks, a "
        "full audit every 8 steps and at teardown; the last column audits at teardown only).  Bare = replaying "
        "the exact pool calls those steps made, recorded at the pools' public methods, on a fresh pool with no "
        "driver.  Direct table writes the scheduler makes (`req_to_token[row, a:b] = ...`) are not pool calls "
        "and are left out of the bare side."
    )
    if worst > 3:
        section.notes.append(
            "Why the target is missed where it is: the pools under test are cheap (a list pop, a small tensor "
            "op), while a checked step compares the pool with a pure-Python model.  Misuse probes snapshot the "
            "whole pool before and after (`observe()`, O(pool + requests seen)), valid calls read the whole free "
            "list back to prove what was consumed, and audits are O(pool).  The allocator families, whose calls "
            "do real tensor work, stay near or under the target."
        )
    return section


# ---------------------------------------------------------------------- CUDA
def bench_cuda(quick: bool) -> Section:
    section = Section("CUDA (torch.cuda.Event timing after warm-up, microseconds)", ["what", "batch", "time (us)"])
    if not torch.cuda.is_available():
        section.notes.append("Skipped: no CUDA device on this machine.  Rerun `poolfuzz bench` on a GPU host.")
        return section
    section.notes.append(f"Device: {torch.cuda.get_device_name(0)}")
    ps, reps = 16, (20 if quick else 200)

    def event_time(fn: Callable[[], None]) -> float:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) / reps * 1e3

    kernels = ["vectorized"] + (["triton"] if triton_available() else [])
    for bs in (1, 8, 64, 256):
        inputs = extend_inputs(bs, ps, seed=bs, device="cuda")
        for k in kernels:
            micros = event_time(_extend_call(k, inputs, ps))
            section.rows.append([f"extend, {k}, page size {ps}", str(bs), f"{micros:,.1f}"])
    for grouped in (True, False):
        label = "Mamba admission, " + ("grouped" if grouped else "per-request alloc(1)")
        section.rows.append([label, "256", f"{event_time(_admission(grouped, 256, 'cuda')):,.1f}"])
    return section


def _kept_scaling(path: Path) -> str:
    """The fuzz worker scaling section as it stands (measured elsewhere): kept verbatim across reruns."""
    if path.exists():
        text = path.read_text()
        if SCALING_HEADER in text:
            return text[text.index(SCALING_HEADER) :].rstrip() + "\n"
    return f"{SCALING_HEADER}\n\nSteps per second of `poolfuzz fuzz` against workers: to be measured.\n"


def write_doc(path: Path, sections: Sequence[Section], quick: bool, seconds: float, smoke: bool = False) -> None:
    scaling = _kept_scaling(path)
    mode = "`--smoke` (numbers meaningless)" if smoke else "`--quick` (noisy)" if quick else "full"
    body = [
        "# Benchmarks",
        "",
        "Produced by `poolfuzz bench` " + f"({mode} run, {seconds:.0f} s); every ratio compares two "
        "timings from the same run, interleaved and best-of-N.  Rerun it to refresh this file; the worker "
        "scaling section at the end is measured separately and kept as is.",
        "",
        "Machine:",
        "",
        *machine_description(),
        "",
    ]
    body += [to_markdown(s) for s in sections]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(body) + "\n" + scaling)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("bench"), description=summary(__doc__))
    parser.add_argument("--quick", action="store_true", help="short run (under 30 s), noisier numbers")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every section once at its smallest size (a few seconds): checks the bench runs, numbers meaningless",
    )
    parser.add_argument("--output", type=Path, default=DOC, help=f"markdown file to write (default {DOC})")
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    args = parser.parse_args(argv)
    random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small-tensor ops: a thread pool only adds wake-up jitter on a shared machine
    args.quick = args.quick or args.smoke
    budget = Budget.of(args.quick, smoke=args.smoke)
    started = perf_counter()
    sections = []
    for run in (
        lambda: bench_versus_upstream(budget),
        lambda: bench_rows(budget),
        lambda: bench_extend(budget, args.quick),
        lambda: bench_mamba(budget),
        lambda: bench_harness(budget, args.quick),
        lambda: bench_prefix_cache(budget, args.quick),
        *(() if args.quick else (lambda: bench_routes(False), lambda: bench_time_to_detect(False))),
        lambda: bench_cuda(args.quick),
    ):
        section = run()
        sections.append(section)
        print(to_text(section), end="\n\n", flush=True)
    torch.set_num_threads(threads)
    elapsed = perf_counter() - started
    print(f"bench took {elapsed:.0f} s")
    if not args.no_write:
        write_doc(args.output, sections, args.quick, elapsed, smoke=args.smoke)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
