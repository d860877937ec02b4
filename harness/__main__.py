"""``python -m harness``: see :mod:`harness.cli`."""

from harness.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
