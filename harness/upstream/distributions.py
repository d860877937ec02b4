"""Every upstream distribution poolfuzz loads, by name: the one place the CLI, the CI mode and the labels look them up.

Each :class:`~poolfuzz.harness.upstream.loading.Distribution` is declared once, beside its stand-ins
(:data:`poolfuzz.harness.upstream.sglang_files.SGLANG`, :data:`poolfuzz.harness.upstream.vllm_files.VLLM`); its title, source
variable and how its copy is found are read from there.
"""

from __future__ import annotations

from poolfuzz.harness.upstream.loading import Distribution
from poolfuzz.harness.upstream.sglang_files import SGLANG
from poolfuzz.harness.upstream.vllm_files import VLLM

DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (SGLANG, VLLM)}
"""Distribution name (``sglang``) -> its declaration."""

__all__ = ["DISTRIBUTIONS"]
