"""``poolfuzz``: see :mod:`poolfuzz.harness.cli`."""

from poolfuzz.harness.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
