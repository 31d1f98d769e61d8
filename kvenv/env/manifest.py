"""The manifest of an applied generation: what was installed where, for which profile and lock,
and how to activate it. JSON, schema 1 (``schemas/manifest.schema.json``).

It is written last into its generation directory (atomically, see :mod:`kvenv._util.atomic`);
the pointer ``<root>/current.json`` (:mod:`kvenv.env.root`) names the current generation.
A manifest whose directories or ``PYTHONPATH``/``PATH`` entries lie outside its runtime root is
refused on reading; the pointer records the manifest's sha256, so a manifest edited by hand is
refused by every reader of the current state (:mod:`kvenv.env.root`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import attrs

from kvenv._util import atomic
from kvenv._util.jsonio import read_json
from kvenv.errors import InputError, Problem
from kvenv.model import convert, formats
from kvenv.model.fields import Sha256

MANIFEST_NAME = "manifest.json"

Layer = Literal["native", "overlay"]


@attrs.frozen
class ProfileRef:
    name: str
    digest: str
    path: str | None = None


@attrs.frozen
class NativeIdentity:
    name: str
    version: str
    sha256: Sha256
    source: str  # "hf:owner/repo@<rev>/<file>", "url:<url>", "path:<p>", "index:<file>"


@attrs.frozen
class GenerationDirs:
    """Absolute directories of one generation, all inside the runtime root."""

    generation: str
    native: str
    overlay: str
    bin: str


@attrs.frozen
class RecordMismatch:
    """A file whose bytes differ from the hash or size its wheel's RECORD gives, accepted
    because the profile waives that wheel's RECORD (``[[overlay.record_waivers]]``).
    ``expected`` and ``actual`` are RECORD columns: ``sha256=<urlsafe b64>,<size>``."""

    file: str
    expected: str
    actual: str


@attrs.frozen
class ExecutablePth:
    """A line of a wheel's ``.pth`` file that ``site`` executes at every interpreter start (it
    begins with ``import`` and a space or tab). Installed only when the profile allows the
    distribution (``[[overlay.allow_pth]]``); ``file`` is the RECORD path."""

    dist: str
    file: str
    line: str


@attrs.frozen
class FileConflict:
    """Two wheels of one layer providing the same file with different bytes: the one first in
    canonical name order (the lock's order) keeps it; the other's RECORD entry is shadowed.
    ``file`` is the RECORD path, relative to the layer's directory."""

    file: str
    winner: str
    loser: str
    layer: Layer = "overlay"


@attrs.frozen
class InstalledDistribution:
    name: str
    version: str
    layer: Layer
    dist_info: str
    record_digest: str
    wheel_sha256: Sha256
    top_level: list[str] = attrs.field(factory=list)
    scripts: list[str] = attrs.field(factory=list)
    record_waived: list[RecordMismatch] = attrs.field(factory=list)


@attrs.frozen
class HostPackage:
    """A protected host package as it was when the generation was applied."""

    name: str
    version: str | None = None
    location: str | None = None


@attrs.frozen
class Activation:
    """What activating the generation sets: entries are prepended to the variables."""

    pythonpath: list[str] = attrs.field(factory=list)
    path: list[str] = attrs.field(factory=list)
    ld_library_path: list[str] = attrs.field(factory=list)
    env: dict[str, str] = attrs.field(factory=dict)
    pth_imports: list[str] = attrs.field(factory=list)  # .pth "import" lines, in order
    site_dirs: list[str] = attrs.field(factory=list)  # dirs whose .pth files are processed


@attrs.frozen
class Manifest:
    schema: Literal[1]
    kvenv_version: str
    created_at: str
    root: str
    dirs: GenerationDirs
    profile: ProfileRef
    lock_digest: str | None
    native: NativeIdentity | None
    distributions: list[InstalledDistribution]
    activation: Activation
    protected: list[str] = attrs.field(factory=list)
    host_protected: list[HostPackage] = attrs.field(factory=list)
    python: str | None = None
    notes: list[str] = attrs.field(factory=list)
    conflicts: list[FileConflict] = attrs.field(factory=list)
    # executable .pth lines the generation's wheels ship (each allowed by the profile)
    executable_pth: list[ExecutablePth] = attrs.field(factory=list)
    # the store entry kvenv-lib was linked from: the sha256 of its listing (kvenv.env.kvenvlib);
    # None in generations made before kvenv-lib was a store entry (symlinks then)
    kvenv_lib: Sha256 | None = None

    @property
    def generation(self) -> str:
        return self.dirs.generation

    def matches(self, profile_digest: str, lock_digest: str | None, native_sha: str | None) -> bool:
        """Whether this manifest is the applied state of exactly these inputs."""
        have = self.native.sha256 if self.native else None
        return (
            self.profile.digest == profile_digest
            and self.lock_digest == lock_digest
            and have == native_sha
        )


@attrs.frozen
class Pointer:
    """``<root>/current.json``: which generation is current, and the sha256 (hex) of its
    manifest's bytes. Every reader of the current manifest checks that digest; a pointer
    without one (written by an older kvenv) cannot vouch for its manifest."""

    schema: Literal[1]
    generation: str
    previous: str | None = None
    manifest_sha256: str | None = None
    kvenv_version: str | None = None  # the kvenv that switched to it (since 0.2)


def manifest_to_dict(manifest: Manifest) -> dict[str, Any]:
    data: dict[str, Any] = convert.unstructure(manifest)
    data["lock_digest"] = manifest.lock_digest
    data["native"] = data.get("native")
    return data


def path_inside(path: str, root: str) -> bool:
    """Is ``path`` ``root`` or below it, lexically (both normalized; no file system access)?"""
    norm, base = os.path.normpath(path), os.path.normpath(root)
    return norm == base or norm.startswith(base.rstrip(os.sep) + os.sep)


def check_manifest(manifest: Manifest, *, file: str | None, root: Path | None) -> list[Problem]:
    """Cross-field checks: every runtime path inside the runtime root (and ``root``, if given)."""
    problems: list[Problem] = []
    base = manifest.root
    if not os.path.isabs(base) or ".." in Path(base).parts:
        problems.append(Problem("root must be an absolute path", file=file, path="$.root"))
        return problems
    if root is not None and os.path.normpath(base) != os.path.normpath(root):
        problems.append(
            Problem(
                f"manifest belongs to the runtime root {base}, not {root}",
                file=file,
                path="$.root",
                fix="pass the matching --root, or rebuild it: `{kvenv apply --repair}`",
            )
        )
    dirs = manifest.dirs
    if "/" in dirs.generation or dirs.generation.startswith("."):
        problems.append(Problem("not a generation id", file=file, path="$.dirs.generation"))
    checks: list[tuple[str, str]] = [
        ("$.dirs.native", dirs.native),
        ("$.dirs.overlay", dirs.overlay),
        ("$.dirs.bin", dirs.bin),
    ]
    checks += [
        (f"$.activation.pythonpath[{i}]", p) for i, p in enumerate(manifest.activation.pythonpath)
    ]
    checks += [(f"$.activation.path[{i}]", p) for i, p in enumerate(manifest.activation.path)]
    checks += [
        (f"$.activation.site_dirs[{i}]", p) for i, p in enumerate(manifest.activation.site_dirs)
    ]
    for where, value in checks:
        if not os.path.isabs(value) or ".." in Path(value).parts or not path_inside(value, base):
            problems.append(
                Problem(
                    f"{value!r} is outside the runtime root {base}",
                    file=file,
                    path=where,
                    fix="the manifest was edited or is not kvenv's: `{kvenv apply --repair}`",
                )
            )
    for index, entry in enumerate(manifest.activation.ld_library_path):
        if not os.path.isabs(entry):
            problems.append(
                Problem(
                    "not an absolute path", file=file, path=f"$.activation.ld_library_path[{index}]"
                )
            )
    return problems


def manifest_from_dict(data: Any, *, file: str | None, root: Path | None = None) -> Manifest:
    """A manifest from its JSON data: a newer format is refused, keys this kvenv does not know
    are ignored (:mod:`kvenv.model.formats`); then the cross-field checks."""
    formats.newer_format(
        data, reads_up_to=formats.MANIFEST_FORMAT, file=file or "<input>", what="manifest"
    )
    manifest = convert.structure(data, Manifest, file=file, what="manifest", lenient=True)
    problems = check_manifest(manifest, file=file, root=root)
    if problems:
        raise InputError(f"invalid manifest: {file or '<input>'}", problems=problems)
    return manifest


def read_manifest(path: Path, *, root: Path | None = None) -> Manifest:
    """Read and check a manifest; raise :class:`InputError` naming the file and ``$.path``."""
    data = read_json(
        path,
        what="manifest",
        missing_hint="run `{kvenv apply}` to create one",
        invalid_hint="rebuild it: `{kvenv apply --repair}`",
    )
    return manifest_from_dict(data, file=str(path), root=root)


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write ``manifest`` to ``path`` atomically and durably."""
    atomic.write_json(path, manifest_to_dict(manifest))
