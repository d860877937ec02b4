"""The ``vllm_engine`` target's caller contract (docs/contracts.md)."""
