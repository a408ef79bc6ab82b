"""matplotlib's pyplot on the non-interactive Agg backend, or ``None`` without matplotlib
(the ``bench`` extra): the tasks then write their reports without figures."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the Agg backend selected, or ``None`` if matplotlib is
    not installed."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the bench extra is missing
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
