"""How inputs are drawn: the move-table framework every family kit declares its inputs in.

:mod:`poolfuzz.strategies.table` (``Move``, ``MoveTable``: a family's configurations, moves and catalogue,
from which its hypothesis machine, walk and bench workload are generated) and
:mod:`poolfuzz.strategies.choosers` (the chooser a move draws through: hypothesis data draws the shrinker
understands, or a plain ``random.Random`` for the walk).  Each kit's own table is in its folder,
``harness/kits/<kit>/moves.py``.  Draws stay small per step so that long stateful runs fit
hypothesis's per-example choice budget (about 8k choices; data-hungry rules silently truncate runs).
"""
