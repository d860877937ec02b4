"""Hypothesis strategies for pool configs, request batches and operation arguments.

Every function is keyword-only and returns a ``SearchStrategy``.  Draws stay
small per step so that long stateful runs fit hypothesis's per-example choice
budget (about 8k choices; data-hungry rules silently truncate runs).
"""
