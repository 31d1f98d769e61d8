"""What makes two nodes' generations "the same": a digest of a manifest's content, pure.

A manifest records where its node put things (the root, the generation id, absolute
directories) and when; none of that may differ the verdict. :func:`generation_digest` covers
what the generation *is*: the profile (name and digest), the lock's digest, the native wheel,
every installed distribution (name, version, layer, the sha256 of the wheel it came from), the
protected names and the activation's own environment variables. Two nodes with equal digests
import the same code; each node's ``kvenv verify`` proves its files still match.
"""

from __future__ import annotations

import hashlib
import json

from kvenv.env.manifest import Manifest


def generation_content(manifest: Manifest) -> dict[str, object]:
    """The node-independent content of ``manifest`` (see the module docstring)."""
    native = manifest.native
    return {
        "profile": {"name": manifest.profile.name, "digest": manifest.profile.digest},
        "lock": manifest.lock_digest,
        "native": None
        if native is None
        else {"name": native.name, "version": native.version, "sha256": native.sha256},
        "distributions": sorted(
            [d.name, d.version, d.layer, d.wheel_sha256] for d in manifest.distributions
        ),
        "protected": sorted(manifest.protected),
        "env": dict(sorted(manifest.activation.env.items())),
    }


def generation_digest(manifest: Manifest) -> str:
    """``sha256:<hex>`` of :func:`generation_content` as canonical JSON."""
    text = json.dumps(generation_content(manifest), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
