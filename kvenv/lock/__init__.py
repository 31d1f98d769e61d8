"""The lock engine: cross-target, host-aware resolution to a hashed PEP 751 pylock.

Reading API for other commands (plan, apply): :func:`read_lock` returns a :class:`LockFile`
(the validated :class:`packaging.pylock.Pylock`, the parsed ``[tool.kvenv]`` table as
:class:`KvenvTable`, and each package's ``[packages.tool.kvenv]``); malformed input raises
:class:`kvenv.errors.LockError` whose problems carry ``$.packages[3].wheels[0]``-style paths.
The resolver itself (resolvelib, unearth) is imported only by ``kvenv.lock.engine``.
"""

from __future__ import annotations

from kvenv.lock.pylock import (
    AssumptionEntry,
    KvenvTable,
    LockFile,
    NativeEntry,
    PackageTool,
    ShadowEntry,
    WaiverEntry,
    parse_lock,
    read_lock,
)

__all__ = [
    "AssumptionEntry",
    "KvenvTable",
    "LockFile",
    "NativeEntry",
    "PackageTool",
    "ShadowEntry",
    "WaiverEntry",
    "parse_lock",
    "read_lock",
]
