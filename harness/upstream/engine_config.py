"""The names the engine loop shares with its callers: the end-of-sequence token, and the server shape's.

The server shape itself is declared once, in the kit: :class:`poolfuzz.harness.kits.engine.config.EngineTargetConfig`
(its fields, bounds and the shapes 0.5.23 builds).  The loop and its builders read that object; this module
only names what they import from it, so the strategies and limits can read the shapes without loading the loop.
"""

from __future__ import annotations

from poolfuzz.harness.kits.engine.config import CACHES, MAMBA_REQUESTS_RATIO, POOLS, EngineShapeError, EngineTargetConfig

EOS = 2
"""The token id every engine request treats as end of sequence (its ``eos_token_ids``)."""

__all__ = ["CACHES", "EOS", "MAMBA_REQUESTS_RATIO", "POOLS", "EngineShapeError", "EngineTargetConfig"]
