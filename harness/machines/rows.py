"""Machines for ``ReqToTokenPool`` and ``DecodeReqToTokenPool``.

Bundles hold request handles and raw rows.  ``consumes`` moves a freed handle
out of ``reqs`` into ``freed``, from which the double-free rule frees it again;
``alloc`` batches name known handles by index, so a freed request can re-enter.  Whether a call is valid is the
driver's decision, from the model, so any interleaving is well-defined.

Two rules take the walk's corner moves (:func:`strategies.configs.row_walk`) from a
drawn seed, so both engines reach them at the same rate and label them with the
same events: batches mixing live and new requests sized to the free rows, and
frees that name a row twice.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, consumes, initialize, multiple, precondition, rule

from harness.machines.base import PoolMachine
from strategies.configs import MOVE_SEEDS, config_corners, corner_steps, row_catalogue, row_pool_configs, row_walk

ROW_WALK = row_walk()


class RowPoolMachine(PoolMachine):
    family = "req_to_token"
    catalogue = row_catalogue()
    reqs = Bundle("reqs")
    freed = Bundle("freed")
    rows = Bundle("rows")

    @initialize(config=row_pool_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]

    def occupancy(self) -> float:
        model = self.driver.model  # type: ignore[union-attr]
        if model.num_rows == 0:
            return 0.0
        return 1.0 - len(model.free) / model.num_rows

    @rule(target=reqs, picks=st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=15)), max_size=4))
    def alloc(self, picks: list[int | None]) -> Any:
        """A batch of new requests (``None``) and known ones: live ones reuse their row, freed ones re-enter."""
        batch = [self.known_handle(pick) for pick in picks]
        return multiple(*(self.do("alloc", batch=batch) or []))

    @precondition(lambda self: bool(self.driver and self.driver.live_handles()))  # type: ignore[attr-defined]
    @rule(target=reqs, seed=MOVE_SEEDS)
    def alloc_mixed(self, seed: int) -> Any:
        """Live requests beside new ones sized to the free rows (exact, one more, one fewer), shuffled."""
        return multiple(*self.walk_move("alloc mixed", seed))

    @precondition(lambda self: self.misuse_enabled)
    @rule(seed=MOVE_SEEDS)
    def free_rows_repeating(self, seed: int) -> None:
        """Live rows freed in one call with one of them named twice."""
        self.walk_move("free_rows repeating", seed)

    def walk_move(self, name: str, seed: int) -> list[int]:
        """Run the walk move ``name`` drawn from ``seed`` (setup steps included); the request handles it made."""
        made: list[int] = []
        for op, args in corner_steps(ROW_WALK.move(name), self.driver, seed):
            result = self.do(op, **args)
            if op == "alloc" and result:
                made += result
        return made

    @rule(target=freed, handle=consumes(reqs))
    def free(self, handle: int) -> int:
        self.do("free", handle=handle)
        return handle

    @precondition(lambda self: self.misuse_enabled)
    @rule(handle=freed)
    def free_again(self, handle: int) -> None:
        self.do("free", handle=handle)

    @rule(target=rows, need_size=st.integers(min_value=-1, max_value=4))
    def alloc_rows(self, need_size: int) -> Any:
        return multiple(*(self.do("alloc_rows", need_size=need_size) or []))

    @rule(row=consumes(rows), more=st.integers(min_value=0, max_value=2))
    def free_rows(self, row: int, more: int) -> None:
        """Free a drawn row plus up to ``more`` other live raw rows in one call.

        Only one row comes from the bundle: a list of ``consumes`` draws aborts
        the example when the bundle runs dry mid-list.
        """
        model = self.driver.model  # type: ignore[union-attr]
        others = sorted(r for r, owner in model.owner.items() if owner is None and r != row)[:more]
        self.do("free_rows", rows=[row, *others])

    @precondition(lambda self: self.misuse_enabled)
    @rule(rows=st.lists(st.integers(min_value=-1, max_value=20), min_size=1, max_size=3))
    def free_arbitrary_rows(self, rows: list[int]) -> None:
        self.do("free_rows", rows=rows)

    @rule()
    def clear(self) -> None:
        self.do("clear")

    @rule(handle=reqs, start=st.integers(min_value=0, max_value=16), length=st.integers(min_value=0, max_value=8))
    def write(self, handle: int, start: int, length: int) -> None:
        self.do("write", handle=handle, start=start, length=length)


class DecodeRowPoolMachine(RowPoolMachine):
    family = "decode_req_to_token"
    catalogue = row_catalogue(decode=True)

    @initialize(config=row_pool_configs(decode=True))
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]
