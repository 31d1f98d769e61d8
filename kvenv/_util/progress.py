"""The one progress callback type of kvenv's long work (fetching, unpacking, linking).

A ``Progress`` is called as ``progress(label, done, total)``: ``label`` names the item (a file,
a wheel), ``done`` counts its units so far (bytes, files), ``total`` is the expected count or
None when unknown. It may be called from worker threads; only the CLI renders it.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, "int | None"], None]
