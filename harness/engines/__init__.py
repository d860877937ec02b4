"""Engines as targets: one protocol (:mod:`.interface`) and judges written once over what it observes (:mod:`.judges`).

Nothing here knows an engine: SGLang's loop (:mod:`poolfuzz.harness.kits.engine`) and any other engine plug in by
reporting their raw memory state as an :class:`~poolfuzz.harness.engines.interface.Observation`.
"""
