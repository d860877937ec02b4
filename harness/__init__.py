"""poolfuzz harness: shadow models, named invariants, drivers, state machines, traces and the CLI."""
