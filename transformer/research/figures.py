"""Writing a matplotlib figure where a run or a sweep keeps it (local or gs://). Imports no
jax: a sweep's plots are redrawn from stored results where nothing trains."""

from __future__ import annotations

import io
import os
from typing import Any

from transformer import storage


def save_figure(fig: Any, path: str, dpi: int = 110, **kw) -> None:
  """Writes `fig` to `path` (local or gs://), in the format its suffix names."""
  image = io.BytesIO()
  fig.savefig(image, dpi=dpi, format=os.path.splitext(path)[1][1:] or "png", **kw)
  storage.write_atomically(path, image.getvalue())
