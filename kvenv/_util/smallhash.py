"""sha256 of small inputs (a profile, a pointer, a manifest, a record key) without loading
OpenSSL.

``import hashlib`` loads ``_hashlib`` and with it libcrypto: about 11 million instructions
(2 to 3 ms) at every start of a command, more than hashing a few kilobytes costs. The start-up
paths (issue 13) hash only such small inputs, so they use CPython's own sha256 module
(``_sha2`` from 3.12, ``_sha256`` before), which gives the same digests, and fall back to
``hashlib`` where neither exists. Large files (wheels, bundles) are hashed by
:mod:`kvenv._util.hashing`, at OpenSSL's speed.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_SHA256: Callable[[bytes], Any] | None = None


def _constructor() -> Callable[[bytes], Any]:
    global _SHA256
    if _SHA256 is None:
        for name in ("_sha2", "_sha256"):
            try:
                _SHA256 = importlib.import_module(name).sha256
                break
            except (ImportError, AttributeError):
                continue
        else:
            import hashlib

            _SHA256 = hashlib.sha256
    return _SHA256


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data``, as 64 lowercase hex characters (``hashlib.sha256``'s)."""
    return str(_constructor()(data).hexdigest())
