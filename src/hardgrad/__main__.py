"""``python -m hardgrad``: the same command line as ``hardgrad``."""

from hardgrad.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
