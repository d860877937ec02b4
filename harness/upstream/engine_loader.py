"""Transitional names for the engine loop's imports: the loader is :mod:`harness.upstream.loading`.

Kept only while the engine loop modules move to :mod:`harness.upstream.sglang_modules`; new code
imports from there.
"""

from harness.upstream.placeholders import StandIn, StandInModule, StandInReached
from harness.upstream.sglang_files import NOT_LOADED, REAL_PREFIXES
from harness.upstream.sglang_modules import EngineModules, active, engine_call, load_engine

__all__ = [
    "NOT_LOADED",
    "REAL_PREFIXES",
    "EngineModules",
    "StandIn",
    "StandInModule",
    "StandInReached",
    "active",
    "engine_call",
    "load_engine",
]
