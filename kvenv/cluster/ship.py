"""A bundle's files onto every node: through Ray's object store in bounded chunks, or from a
path every node can read (shared storage).

The driver opens (and so verifies) the bundle, then puts each file listed in its
``SHA256SUMS`` into the object store in chunks of at most :data:`CHUNK_SIZE` bytes, each with
its own sha256 (:func:`ship_bundle`). On a node, :func:`receive_bundle` fetches one chunk at a
time, checks it against its sha256 before writing it, checks every file's sha256 and size,
renames the finished directory into the node's cache and opens it as a bundle again (every
file against ``SHA256SUMS``) before anything uses it. Nothing unverified is ever installed: a
chunk, a file or a bundle that does not match is an :class:`~kvenv.errors.IntegrityError` and
the staging directory is removed. A bundle already received (same ``SHA256SUMS`` digest) and
still intact is reused, so a rerun ships nothing twice to a node that has it.

Ray is never imported here: the driver and the node pass in the ``ray`` module they use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from kvenv.errors import InputError, IntegrityError, Problem
from kvenv.fetch.bundle import SUMS, BundleInfo, open_bundle

CHUNK_SIZE = 8 * 1024 * 1024
RECEIVED_DIR = "cluster-bundles"


@attrs.frozen
class ShippedChunk:
    ref: Any  # a ray.ObjectRef holding the chunk's bytes
    sha256: str
    size: int


@attrs.frozen
class ShippedFile:
    path: str  # relative to the bundle, as SHA256SUMS lists it
    sha256: str
    size: int
    chunks: tuple[ShippedChunk, ...]


@attrs.frozen
class ShippedBundle:
    """A bundle in the object store: what a node needs to rebuild and check it."""

    digest: str  # sha256 of the bundle's SHA256SUMS file: the bundle's identity
    profile: str  # the bundled profile's name: where each node keeps it
    files: tuple[ShippedFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def bundle_digest(bundle: BundleInfo) -> str:
    return hashlib.sha256((bundle.root / SUMS).read_bytes()).hexdigest()


def _chunks(ray: Any, path: Path, chunk_size: int) -> tuple[str, int, tuple[ShippedChunk, ...]]:
    whole = hashlib.sha256()
    chunks: list[ShippedChunk] = []
    size = 0
    with open(path, "rb") as stream:
        while True:
            data = stream.read(chunk_size)
            if not data and chunks:
                break
            whole.update(data)
            size += len(data)
            chunks.append(ShippedChunk(ray.put(data), hashlib.sha256(data).hexdigest(), len(data)))
            if len(data) < chunk_size:
                break
    return whole.hexdigest(), size, tuple(chunks)


def ship_bundle(ray: Any, directory: Path, *, chunk_size: int = CHUNK_SIZE) -> ShippedBundle:
    """Open and verify the bundle at ``directory`` and put its files into the object store."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be positive")
    bundle = open_bundle(directory)
    files: list[ShippedFile] = []
    for rel in [SUMS, *sorted(bundle.sums)]:
        sha, size, chunks = _chunks(ray, bundle.root / rel, chunk_size)
        if rel != SUMS and sha != bundle.sums[rel]:
            raise IntegrityError(f"{bundle.root / rel} changed while it was being shipped")
        files.append(ShippedFile(rel, sha, size, chunks))
    return ShippedBundle(bundle_digest(bundle), bundle.index.profile.name, tuple(files))


def _safe(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def _receive_file(ray: Any, item: ShippedFile, dest: Path) -> None:
    if not _safe(item.path):
        raise IntegrityError(f"refusing a shipped file outside the bundle: {item.path!r}")
    target = dest / item.path
    target.parent.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    size = 0
    with open(target, "xb") as stream:
        for index, chunk in enumerate(item.chunks):
            data = ray.get(chunk.ref)  # one chunk in memory at a time
            if len(data) != chunk.size or hashlib.sha256(data).hexdigest() != chunk.sha256:
                raise IntegrityError(
                    f"chunk {index} of {item.path} arrived damaged (its sha256 or size differs)",
                    hint="nothing was installed; run the command again",
                )
            stream.write(data)
            whole.update(data)
            size += len(data)
        stream.flush()
        os.fsync(stream.fileno())
    if size != item.size or whole.hexdigest() != item.sha256:
        raise IntegrityError(
            f"{item.path} arrived damaged: expected sha256 {item.sha256} and {item.size} bytes",
            hint="nothing was installed; run the command again",
        )


def received_path(cache: Path, profile: str) -> Path:
    """Where a node keeps the last bundle it received for ``profile``: one stable place per
    profile name, so the profile file that owns the node's runtime root stays the same from
    one bundle to the next (:func:`received_profile`)."""
    if not _safe(profile) or len(Path(profile).parts) != 1:
        raise IntegrityError(
            f"refusing a bundled profile name that is not a plain name: {profile!r}"
        )
    return cache / RECEIVED_DIR / profile


def received_profile(cache: Path, profile: str | None) -> Path | None:
    """The profile file of the bundle this node last received for ``profile`` (None: the one
    profile it received, if exactly one), or None."""
    base = cache / RECEIVED_DIR
    if profile is None:
        names = (
            [p.name for p in base.iterdir() if not p.name.startswith(".")] if base.is_dir() else []
        )
        if len(names) != 1:
            return None
        profile = names[0]
    if "/" in profile or profile.endswith(".toml") or not _safe(profile):
        return None
    path = base / profile / "profiles" / f"{profile}.toml"
    return path if path.is_file() else None


def receive_bundle(ray: Any, shipped: ShippedBundle, cache: Path) -> BundleInfo:
    """Rebuild ``shipped`` under ``cache`` on this node, check every chunk and file, and open
    it (every file against its ``SHA256SUMS`` again); an intact copy of the same bundle is
    reused, another bundle for the same profile is replaced once the new one is verified."""
    final = received_path(cache, shipped.profile)
    if final.is_dir():
        try:
            bundle = open_bundle(final)
            if bundle_digest(bundle) == shipped.digest:
                return bundle
        except (IntegrityError, InputError, OSError):
            pass
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".receiving-", dir=final.parent))
    try:
        for item in shipped.files:
            _receive_file(ray, item, staging)
        bundle = open_bundle(staging)
        if bundle_digest(bundle) != shipped.digest:
            raise IntegrityError("the received bundle's SHA256SUMS is not the one shipped")
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=".replaced-", dir=final.parent))
            os.rename(final, old / "bundle")
        os.rename(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return open_bundle(final, verify=False)  # just verified, under another name


def shared_bundle(directory: Path) -> BundleInfo:
    """A bundle every node reads at the same path: opened and verified on this node."""
    path = Path(directory)
    if not path.is_dir():
        raise IntegrityError(
            f"the shared bundle {path} is not readable on this node",
            problems=[Problem("every node must see the bundle at the same path")],
            hint="mount the shared storage on every node, or ship the bundle (drop --shared)",
        )
    return open_bundle(path)
