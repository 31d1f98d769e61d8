"""Damaging files as the integrity tests need: one byte flipped in the middle of a wheel, in a
bundle after its SHA256SUMS was written, or in a cache entry with its size and times kept (so
the cheap check trusts it and only reading it finds the damage)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.applyenv import Project


def flip_middle_byte(path: Path, mask: int) -> None:
    """XOR the byte in the middle of ``path`` with ``mask``."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= mask
    path.write_bytes(bytes(data))


def damage_in_place(path: Path) -> None:
    """Flip one bit of ``path`` (made writable first), keeping its size, atime and mtime."""
    before = path.stat()
    os.chmod(path, 0o644)
    flip_middle_byte(path, 0x01)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def damaged_bundle(project: Project, directory: Path) -> Path:
    """A real bundle of ``project`` at ``directory/bundle`` (its cache ``directory/bundle-cache``)
    with the helper wheel altered after SHA256SUMS was written."""
    from kvenv.fetch.bundle import make_bundle

    bundle = directory / "bundle"
    make_bundle(project.loaded(), bundle, cache=directory / "bundle-cache")
    flip_middle_byte(next((bundle / "wheels").glob("helper-*.whl")), 0xFF)
    return bundle
