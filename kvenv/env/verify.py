"""``kvenv status`` and ``kvenv verify``: what is applied, and does it still match.

``verify`` re-hashes every installed file against its distribution's RECORD (in threads: the
hashing releases the GIL) and every file of ``kvenv-lib`` against its listing
(:mod:`kvenv.env.kvenvlib`), checks each RECORD against the digest the manifest recorded, that no
file was added to the generation (:mod:`kvenv.env.strays`), that no protected import name
appeared in the generation, and that the protected host packages are still at the versions
recorded when the generation was applied.

A file two wheels provided with different bytes (a conflict resolved at apply time, in the
manifest's ``conflicts``) is checked against the winner's RECORD; the loser's RECORD entry for it
is shadowed, not drift (:func:`shadowed`). A waived RECORD needs nothing special: the installed
RECORD lists the actual digests.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import attrs

from kvenv._util.importnames import import_name_of, protected_import_names
from kvenv.env.manifest import Manifest
from kvenv.errors import KvenvError
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot

if TYPE_CHECKING:
    from kvenv.model.loading import LoadedProfile

DriftKind = Literal[
    "missing",
    "modified",
    "record",
    "shadow",
    "host",
    "store",
    "cache",
    "state",
    "activation",
    "added",
]


@attrs.frozen
class Drift:
    kind: DriftKind
    path: str
    message: str


def _layer_dir(manifest: Manifest, layer: str) -> Path:
    return Path(manifest.dirs.native if layer == "native" else manifest.dirs.overlay)


def _hash_file(path: Path, algorithm: str) -> tuple[str, int] | None:
    digest = hashlib.new(algorithm)
    size = 0
    try:
        with open(path, "rb", buffering=0) as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return None
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("="), size


def _check_file(item: tuple[Path, str, str, str]) -> Drift | None:
    path, algorithm, value, size = item
    result = _hash_file(path, algorithm)
    if result is None:
        return Drift("missing", str(path), f"installed file is missing: {path}")
    if result[0] != value or str(result[1]) != size:
        return Drift("modified", str(path), f"installed file differs from its RECORD: {path}")
    return None


def shadowed(manifest: Manifest) -> list[str]:
    """The RECORD entries that a file conflict's winner shadows, one line each."""
    return [
        f"{c.loser}'s {c.file} is shadowed by {c.winner}'s (checked against {c.winner}'s RECORD)"
        for c in manifest.conflicts
    ]


def _bytecode_stem(source: str) -> str:
    """``pkg/__pycache__/mod.`` for the source ``pkg/mod.py``: what its ``.pyc`` files'
    paths start with, for any cache tag."""
    directory, _, name = source.rpartition("/")
    prefix = directory + "/" if directory else ""
    return f"{prefix}__pycache__/{name[:-3]}." if name.endswith(".py") else ""


def _pyc_stem(pyc: str) -> str:
    """``pkg/__pycache__/mod.`` for ``pkg/__pycache__/mod.cpython-311.pyc``."""
    directory, _, name = pyc.rpartition("/")
    prefix = directory + "/" if directory else ""
    return prefix + name.split(".", 1)[0] + "."


def verify_files(manifest: Manifest, *, jobs: int = 8) -> list[Drift]:
    """Every file of every distribution against its RECORD (less the entries a conflict's
    winner shadows), and each RECORD against the manifest's digest."""
    drifts: list[Drift] = []
    items: list[tuple[Path, str, str, str]] = []
    losers = {(c.layer, c.loser, c.file) for c in manifest.conflicts}
    losers |= {(c.layer, c.loser, _bytecode_stem(c.file)) for c in manifest.conflicts}
    for dist in manifest.distributions:
        site = _layer_dir(manifest, dist.layer)
        record = site / dist.dist_info / "RECORD"
        try:
            data = record.read_bytes()
        except FileNotFoundError:
            drifts.append(Drift("missing", str(record), f"RECORD of {dist.name} is missing"))
            continue
        if "sha256:" + hashlib.sha256(data).hexdigest() != dist.record_digest:
            drifts.append(
                Drift("record", str(record), f"RECORD of {dist.name} differs from the manifest")
            )
        for row in csv.reader(data.decode("utf-8").splitlines()):
            if len(row) != 3 or not row[1] or (dist.layer, dist.name, row[0]) in losers:
                continue
            if row[0].endswith(".pyc") and (dist.layer, dist.name, _pyc_stem(row[0])) in losers:
                continue  # the bytecode of a shadowed source (kvenv.env.bytecode)
            algorithm, _, value = row[1].partition("=")
            if algorithm not in hashlib.algorithms_available:
                continue
            items.append((Path(os.path.normpath(site / row[0])), algorithm, value, row[2]))
    with ThreadPoolExecutor(max(1, jobs), thread_name_prefix="kvenv-verify") as pool:
        drifts.extend(d for d in pool.map(_check_file, items, chunksize=64) if d is not None)
    if manifest.kvenv_lib is not None:  # kvenv's own copy, held to its listing
        from kvenv.env.kvenvlib import lib_drift
        from kvenv.env.strays import generation_path

        for kind, path, message in lib_drift(generation_path(manifest), manifest.kvenv_lib):
            drifts.append(Drift("missing" if kind == "missing" else "modified", path, message))
    else:
        drifts += _dangling_lib_links(manifest)
    return drifts


def _dangling_lib_links(manifest: Manifest) -> list[Drift]:
    """An older generation's ``kvenv-lib`` links (into the installation of the kvenv that
    applied it) whose target is gone: ``import kvenv`` fails in that generation."""
    from kvenv.env.rootfiles import KVENV_LIB
    from kvenv.env.strays import generation_path

    lib = generation_path(manifest) / KVENV_LIB
    if not lib.is_dir() or lib.is_symlink():
        return []
    return [
        Drift(
            "missing",
            str(link),
            f"{link} points into an installation of kvenv that is gone ({os.readlink(link)}); "
            "a fresh generation holds its own copy",
        )
        for link in sorted(lib.iterdir())
        if link.is_symlink() and not link.exists()
    ]


def verify_not_shadowing(manifest: Manifest) -> list[Drift]:
    names = protected_import_names(manifest.protected)
    out: list[Drift] = []
    for directory in (manifest.dirs.overlay, manifest.dirs.native):
        if not os.path.isdir(directory):
            out.append(Drift("missing", directory, f"generation directory is missing: {directory}"))
            continue
        for entry in sorted(os.listdir(directory)):
            if import_name_of(entry) in names:
                path = os.path.join(directory, entry)
                out.append(Drift("shadow", path, f"{path} shadows a protected host package"))
    return out


def verify_no_strays(manifest: Manifest) -> list[Drift]:
    """Every file in the generation that its manifest does not list (:mod:`kvenv.env.strays`):
    an added ``sitecustomize.py``, ``.pth``, module or console script."""
    from kvenv.env.strays import stray_files

    return [
        Drift(
            "added", path, f"file added to the generation (its manifest does not list it): {path}"
        )
        for path in stray_files(manifest)
    ]


def verify_host(manifest: Manifest, host: HostSnapshot) -> list[Drift]:
    """Protected host packages still at the versions recorded at apply time."""
    out: list[Drift] = []
    for package in manifest.host_protected:
        found = host.find(package.name)
        now = found.version if found else None
        if package.version is None and found is None:
            continue
        if found is None:
            out.append(
                Drift(
                    "host",
                    package.name,
                    f"protected host package {package.name} {package.version} is gone",
                )
            )
        elif package.version is not None and now is not None and now != package.version:
            out.append(
                Drift(
                    "host",
                    package.name,
                    f"protected host package {package.name} changed: "
                    f"{package.version} at apply time, {now} now",
                )
            )
    return out


def verify(
    manifest: Manifest,
    host: HostSnapshot | None,
    *,
    jobs: int = 8,
    locations: Locations | None = None,
) -> list[Drift]:
    drifts = verify_not_shadowing(manifest)
    drifts += verify_files(manifest, jobs=jobs)
    drifts += verify_no_strays(manifest)
    if host is not None:
        drifts += verify_host(manifest, host)
    if locations is not None:  # the sealed store entries and cached wheels behind it
        from kvenv.env.integrity import generation_damage

        damage = generation_damage(manifest, locations)
        drifts += [Drift(d.kind, d.path, d.message) for d in damage]
    return drifts


def verify_activation(
    manifest: Manifest, loaded: LoadedProfile, host: HostSnapshot | None
) -> list[Drift]:
    """The manifest's activation against what activation would emit from the profile and the
    generation (:func:`kvenv.env.activation.activation_differences`)."""
    from kvenv.env.activation import activation_differences

    runtime = loaded.profile.runtime
    found = activation_differences(
        manifest,
        {str(k): v for k, v in runtime.env.items()},
        host,
        same_profile=manifest.profile.digest == loaded.digest,
        allowed_env=[str(k) for k in runtime.allow_env],
    )
    where = f"{manifest.dirs.generation}/manifest.json"
    return [Drift("activation", where, message) for message in found]


def drift_error(drifts: Sequence[Drift], repair: str = "kvenv apply --repair") -> KvenvError:
    """The failed check for ``drifts``; its hint is ``repair``, the exact command that repairs
    this profile's root (re-verifies the cache and the store, builds a fresh generation)."""
    from kvenv.errors import CheckFailed, Problem

    hint = f"repair it: `{repair}`"
    if drifts and all(d.kind == "host" for d in drifts):  # the host changed, not the generation
        hint = (
            "the host changed, not what kvenv installed: restore the host's package (or "
            f"interpreter), or rebuild for the host as it is now: `{repair}` (refused, exit 3, "
            "while a protected package the profile needs is missing)"
        )
    return CheckFailed(
        f"the applied generation has drifted ({len(drifts)} problem(s))",
        problems=[Problem(d.message) for d in drifts[:50]],
        hint=hint,
    )
