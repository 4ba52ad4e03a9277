"""The matplotlib steps every bench plot shares: a file-only backend, and a figure saved.

matplotlib is the ``plots`` extra; callers check it with ``require_extra`` first, so these
helpers import it directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["pyplot", "save_figure"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend: plots go to files, never to a window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, png: Path) -> Path:
    """Lay ``fig`` out, write it to ``png`` at 120 dpi and close it; returns ``png``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(png, dpi=120)
    # pyplot keeps every open figure alive until it is closed; a long bench makes several.
    plt.close(fig)
    return png
