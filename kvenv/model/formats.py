"""The format version of every file kvenv writes, and the one refusal of a newer one.

Each file kvenv writes for later carries a format version (``schema``) and, since kvenv 0.2,
the version of the kvenv that wrote it (host snapshots aside: they stay reproducible). A
reader ignores keys it does not know within a format version it reads
(:data:`kvenv.model.convert.lenient_converter`) and refuses a format version above its own
with "written by kvenv X (format N); this kvenv reads up to M: upgrade kvenv" (exit 2, the
file and ``$.path`` named). Profiles are not here: they are written by hand, and
an unknown key there is a typo to catch. See docs/compatibility.md.

Standard library and :mod:`kvenv.errors` only: the pointer is read on start-up paths.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# The newest format version this kvenv reads and writes, per file (docs/compatibility.md).
LOCK_FORMAT = 1  # [tool.kvenv] schema, in pylock.<profile>.toml
SNAPSHOT_FORMAT = 1  # a host snapshot (kvenv fingerprint --save)
MANIFEST_FORMAT = 1  # <root>/generations/<id>/manifest.json
POINTER_FORMAT = 1  # <root>/current.json
BUNDLE_FORMAT = 1  # <bundle>/bundle.json, also inside a single-file bundle
SHARDS_FORMAT = 1  # kvenv-shards.json beside a saved sharded checkpoint (kvenv.runtime)
UPGRADE = "upgrade kvenv (pip install -U kvenv-overlay, or the version your team pins)"


def newer_format(
    data: Mapping[str, object] | object,
    *,
    reads_up_to: int,
    file: str,
    where: str = "$",
    writer_key: str = "kvenv_version",
    what: str = "file",
) -> None:
    """Raise :class:`kvenv.errors.InputError` when ``data`` (a file's top table, or the table
    at ``where``) declares a format version (``schema``) above ``reads_up_to``; anything else
    (no table, no or a malformed ``schema``) is left to the reader's own validation."""
    if not isinstance(data, dict):
        return
    version = data.get("schema")
    if not isinstance(version, int) or isinstance(version, bool) or version <= reads_up_to:
        return
    from kvenv.errors import InputError, Problem

    writer = data.get(writer_key)
    by = f"kvenv {writer}" if isinstance(writer, str) and writer else "a newer kvenv"
    message = (
        f"written by {by} (format {version}); this kvenv reads up to {reads_up_to}: upgrade kvenv"
    )
    path = "$.schema" if where == "$" else f"{where}.schema"
    raise InputError(
        f"{what} from a newer kvenv: {file}",
        problems=[Problem(message, file=file, path=path, fix=UPGRADE)],
    )
