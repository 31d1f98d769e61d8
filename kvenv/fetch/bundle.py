"""Offline bundles: every artifact of a profile, with the profile, lock and host snapshot, in
one directory that installs with no network (``kvenv apply --offline --from DIR``).

Layout (the bundle is a small self-contained project; relative paths in the profile resolve
inside it)::

    DIR/bundle.json                 index: profile, lock, snapshot, every artifact (schema 1)
    DIR/SHA256SUMS                  sha256sum format, every file but itself
    DIR/profiles/<name>.toml        the profile after ``extends``, as one document
    DIR/<overlay.lock>              the lock (e.g. locks/pylock.<name>.toml); its wheels' paths
                                    resolve to DIR/wheels/ (see _bundled_lock)
    DIR/<host.snapshot>             the host snapshot, when the profile has one
    DIR/wheels/<filename>           the native wheel and every overlay wheel

:func:`make_bundle` builds it next to ``DIR`` and swaps it in with renames, so a failed run
leaves ``DIR`` as it was; it refuses a non-empty directory that is not a kvenv bundle.
:func:`open_bundle` checks ``SHA256SUMS`` (every file re-hashed, unless, for ``apply``, an earlier
run verified the bundle and no file under it changed identity since: the memo's ``bundle``
records) and ``bundle.json`` against each other before anything is used. ``sha256sum -c
SHA256SUMS`` run inside ``DIR`` checks the same.
See ``docs/bundles.md`` for the Kaggle dataset flow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Literal

import attrs

from kvenv import __version__
from kvenv._util import jsonio, memo, tomlio
from kvenv._util.hashing import HashingWriter, copy_hashing, sha256_file, sha_mismatch
from kvenv._util.progress import Progress
from kvenv._util.threads import thread_map
from kvenv.errors import InputError, IntegrityError, Problem
from kvenv.fetch.cache import default_cache_root
from kvenv.fetch.core import LocalFiles, fetch_all
from kvenv.lock.input import profile_lock
from kvenv.lock.pylock import dumps_lock
from kvenv.model import convert, formats
from kvenv.model.fields import Pep440Version, ProfileName, RelPath, Sha256, WheelFilename
from kvenv.model.loading import LoadedProfile, dump_profile, profile_digest
from kvenv.model.profile import PathSource
from kvenv.plan.artifacts import Artifact, artifacts_for

INDEX = "bundle.json"
SUMS = "SHA256SUMS"
KIND: Literal["kvenv-bundle"] = "kvenv-bundle"
WHEELS = "wheels"
_SUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


@attrs.frozen
class BundledArtifact:
    name: str
    version: Pep440Version
    filename: WheelFilename
    sha256: Sha256
    size: int
    role: Literal["native", "overlay"]
    file: RelPath


@attrs.frozen
class BundledProfile:
    name: ProfileName
    file: RelPath
    digest: str


@attrs.frozen
class BundleIndex:
    """``bundle.json``."""

    schema: Literal[1]
    kind: Literal["kvenv-bundle"]
    kvenv_version: str
    created: str
    profile: BundledProfile
    # None is left out of bundle.json (convert.unstructure), hence the defaults
    lock: RelPath | None = None
    host_snapshot: RelPath | None = None
    artifacts: list[BundledArtifact] = attrs.field(factory=list)


@attrs.frozen
class BundleInfo:
    """A bundle on disk whose files were checked against ``SHA256SUMS`` (unless told not to)."""

    root: Path
    index: BundleIndex
    sums: dict[str, str]  # relative path -> sha256
    verified: bool

    @property
    def profile_path(self) -> Path:
        return self.root / self.index.profile.file

    @property
    def lock_path(self) -> Path | None:
        return self.root / self.index.lock if self.index.lock else None

    @property
    def snapshot_path(self) -> Path | None:
        return self.root / self.index.host_snapshot if self.index.host_snapshot else None

    @property
    def artifacts(self) -> list[BundledArtifact]:
        return self.index.artifacts

    def local_files(self) -> LocalFiles:
        """The bundled artifacts by sha256, for :func:`kvenv.fetch.core.fetch_all`."""
        return LocalFiles(self.root, {a.sha256: self.root / a.file for a in self.artifacts})

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = convert.unstructure(self.index)
        data["root"] = str(self.root)
        data["verified"] = self.verified
        data["files"] = len(self.sums)
        return data


# --- making -----------------------------------------------------------------------------------


def make_bundle(
    loaded: LoadedProfile,
    out_dir: Path,
    *,
    cache: Path | None = None,
    offline: bool = False,
    jobs: int = 8,
    progress: Progress | None = None,
    index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
) -> BundleInfo:
    """Gather the profile's artifacts (fetched and verified) into ``out_dir``."""
    out = Path(out_dir).expanduser().absolute()
    _refuse_foreign(out)
    lock = profile_lock(loaded)
    artifacts = artifacts_for(loaded, lock.lockfile if lock else None)
    files = fetch_all(
        artifacts,
        cache=cache or default_cache_root(),
        offline=offline,
        jobs=jobs,
        progress=progress,
        index_urls=index_urls,
        find_links=find_links,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.kvenv-new-"))
    try:
        lock_file = Path(lock.path) if lock else None
        index = _write_contents(staging, loaded, artifacts, files, lock_file)
        sums = _write_sums(staging)
        _swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BundleInfo(root=out, index=index, sums=sums, verified=True)


def _refuse_foreign(out: Path) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"bundle destination is not a directory: {out}")
    if not any(out.iterdir()) or _is_bundle(out):
        return
    raise InputError(
        f"refusing to write a bundle into a non-empty directory that is not a kvenv bundle: {out}",
        hint="choose a new or empty directory for -o",
    )


def _is_bundle(directory: Path) -> bool:
    try:
        data = jsonio.loads_json(
            (directory / INDEX).read_text(encoding="utf-8"), file=str(directory / INDEX)
        )
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == KIND


def _write_contents(
    staging: Path,
    loaded: LoadedProfile,
    artifacts: list[Artifact],
    files: dict[str, Path],
    lock_path: Path | None,
) -> BundleIndex:
    profile = loaded.profile
    bundled: list[BundledArtifact] = []
    names: dict[str, str] = {}
    (staging / WHEELS).mkdir()
    for artifact in artifacts:
        source = files[artifact.sha256]
        filename = artifact.filename or source.name
        if names.setdefault(filename, artifact.sha256) != artifact.sha256:
            raise IntegrityError(f"two different artifacts are both named {filename}")
        relative = f"{WHEELS}/{filename}"
        size = _copy_verified(source, staging / relative, artifact.sha256)
        bundled.append(
            BundledArtifact(
                name=artifact.name,
                version=Pep440Version(artifact.version),
                filename=WheelFilename(filename),
                sha256=Sha256(artifact.sha256),
                size=size,
                role=artifact.role,
                file=RelPath(relative),
            )
        )
    native = profile.native
    if native is not None and isinstance(native.source, PathSource):
        native_file = names_for(bundled, native.sha256)
        native = attrs.evolve(native, source=PathSource(kind="path", path=RelPath(native_file)))
    single = attrs.evolve(profile, extends=None, native=native)
    profile_rel = f"profiles/{profile.name}.toml"
    _write(staging / profile_rel, dump_profile(single, schema_line=None).encode())
    lock_rel: str | None = None
    if lock_path is not None:
        lock_rel = profile.lock_relpath
        _write(staging / lock_rel, _bundled_lock(lock_path, staging, lock_rel, bundled))
    snapshot_rel: str | None = None
    snapshot = loaded.snapshot_path
    if snapshot is not None and snapshot.is_file() and profile.host.snapshot is not None:
        snapshot_rel = profile.host.snapshot
        _write(staging / snapshot_rel, snapshot.read_bytes())
    index = BundleIndex(
        schema=1,
        kind=KIND,
        kvenv_version=__version__,
        created=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        profile=BundledProfile(
            name=profile.name, file=RelPath(profile_rel), digest=profile_digest(single)
        ),
        lock=RelPath(lock_rel) if lock_rel else None,
        host_snapshot=RelPath(snapshot_rel) if snapshot_rel else None,
        artifacts=bundled,
    )
    text = json.dumps(convert.unstructure(index), indent=2) + "\n"
    _write(staging / INDEX, text.encode())
    return index


def _bundled_lock(
    lock_path: Path, staging: Path, lock_rel: str, bundled: list[BundledArtifact]
) -> bytes:
    """The lock for the bundle: byte for byte when every bundled wheel's ``path`` already
    resolves to ``wheels/<filename>`` inside the bundle (a portable lock at ``locks/``), else a
    copy whose bundled wheels are given by that path (no ``url``, no ``index``), so that uv
    and pip install the bundled lock from the bundle alone."""
    raw = lock_path.read_bytes()  # read once: parsed here, returned as is when unchanged
    data = tomlio.loads(raw.decode("utf-8"), file=str(lock_path))
    where = {item.sha256: item.file for item in bundled}  # the native's entry too
    lock_dir = (staging / lock_rel).parent
    changed = False
    for package in data.get("packages", []):
        moved = False
        for number, wheel in enumerate(package.get("wheels", [])):
            rel = where.get((wheel.get("hashes") or {}).get("sha256", ""))
            if rel is None:
                continue
            path = Path(os.path.relpath(staging / rel, lock_dir)).as_posix()
            if wheel.get("path") == path and "url" not in wheel:
                continue
            head = {"name": wheel["name"]} if "name" in wheel else {}
            rest = {k: v for k, v in wheel.items() if k not in ("name", "url", "path")}
            package["wheels"][number] = {**head, "path": path, **rest}
            moved = True
        if moved:
            package.pop("index", None)
            changed = True
    if not changed:
        return raw
    return dumps_lock(data).encode()


def names_for(bundled: list[BundledArtifact], sha256: str) -> str:
    return next(item.file for item in bundled if item.sha256 == sha256)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise InputError(f"two bundle files would share the path {path.name}")
    path.write_bytes(data)


def _copy_verified(source: Path, dest: Path, sha256: str) -> int:
    """Copy while hashing, so the bundle holds exactly the verified bytes."""
    with open(source, "rb") as src, open(dest, "wb") as raw:
        sink = HashingWriter(raw, label=dest.name)
        copy_hashing(src, sink)
    sink.check(sha256)
    return sink.size


def _write_sums(staging: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        relative = path.relative_to(staging).as_posix()
        sums[relative] = sha256_file(path)[0]
    text = "".join(f"{sha}  {rel}\n" for rel, sha in sorted(sums.items()))
    (staging / SUMS).write_text(text, encoding="utf-8")
    return sums


def _swap_in(staging: Path, out: Path) -> None:
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.kvenv-old-"))
    old.rmdir()
    os.replace(out, old)
    try:
        os.replace(staging, out)
    except BaseException:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


# --- opening ----------------------------------------------------------------------------------


def open_bundle(
    directory: Path, *, verify: bool = True, jobs: int = 4, memo_root: Path | None = None
) -> BundleInfo:
    """Read a bundle, check ``bundle.json`` against ``SHA256SUMS`` and (with ``verify``) every
    file against its sum. Raises :class:`InputError` for a malformed bundle and
    :class:`IntegrityError` for any file that is missing or differs.

    ``memo_root``: where a bundle verified by an earlier run is remembered (memo kind
    ``bundle``: every file under it by identity, ctime included; one changed file and the
    whole bundle is hashed again). Without it (``kvenv bundle verify``, ``apply --repair``)
    every file is hashed."""
    root = Path(directory).expanduser().absolute()
    if not root.is_dir():
        raise InputError(f"bundle not found (not a directory): {root}")
    tree = None if memo_root is None else memo.dep("tree", [str(root), True])  # before reading
    sums = _read_sums(root)
    index = read_index(root)
    _cross_check(root, index, sums)
    if verify and not (memo_root is not None and memo.get(memo_root, "bundle", str(root))):
        _verify_files(root, sums, jobs=jobs)
        if memo_root is not None and tree is not None and tree[2] is not None:
            value = {"profile": str(root / index.profile.file)}
            memo.put(memo_root, "bundle", str(root), [tree], value)
    if verify:
        sizes = {item.file: item.size for item in index.artifacts}
        for rel, size in sizes.items():
            actual = (root / rel).stat().st_size
            if actual != size:
                raise IntegrityError(
                    f"size mismatch for {root / rel}: expected {size} bytes, got {actual}"
                )
    return BundleInfo(root=root, index=index, sums=sums, verified=verify)


def _safe_relative(text: str) -> bool:
    pure = PurePosixPath(text)
    return (
        not pure.is_absolute()
        and "\\" not in text
        and "\x00" not in text
        and ".." not in pure.parts
        and pure.as_posix() == text
    )


def _read_sums(root: Path) -> dict[str, str]:
    path = root / SUMS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"not a kvenv bundle (no {SUMS}): {root}",
            hint="make one with `kvenv bundle PROFILE -o DIR`",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    sums: dict[str, str] = {}
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _SUM_LINE.fullmatch(line)
        if match is None or not _safe_relative(match.group(2)):
            problems.append(
                Problem(f"line {number} is not '<sha256>  <relative path>'", file=str(path))
            )
            continue
        sha, rel = match.groups()
        if rel in sums:
            problems.append(Problem(f"line {number}: {rel} is listed twice", file=str(path)))
        sums[rel] = sha
    if problems:
        raise InputError(f"malformed {SUMS}: {path}", problems=problems)
    return sums


def read_index(root: Path) -> BundleIndex:
    """The bundle's ``bundle.json``, unchecked against its sums: a newer format is refused,
    keys this kvenv does not know are ignored (:mod:`kvenv.model.formats`)."""
    path = root / INDEX
    try:
        data = jsonio.loads_json(path.read_text(encoding="utf-8"), file=str(path))
    except FileNotFoundError:
        raise InputError(f"not a kvenv bundle (no {INDEX}): {root}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    formats.newer_format(
        data, reads_up_to=formats.BUNDLE_FORMAT, file=str(path), what="bundle index"
    )
    return convert.structure(data, BundleIndex, file=str(path), what="bundle index", lenient=True)


def _cross_check(root: Path, index: BundleIndex, sums: dict[str, str]) -> None:
    problems: list[Problem] = []
    file = str(root / INDEX)
    if INDEX not in sums:
        problems.append(Problem(f"{INDEX} is not listed in {SUMS}", file=str(root / SUMS)))
    listed = [("$.profile.file", index.profile.file)]
    if index.lock:
        listed.append(("$.lock", index.lock))
    if index.host_snapshot:
        listed.append(("$.host_snapshot", index.host_snapshot))
    for where, rel in listed:
        if rel not in sums:
            problems.append(Problem(f"{rel} is not listed in {SUMS}", file=file, path=where))
    for number, item in enumerate(index.artifacts):
        where = f"$.artifacts[{number}]"
        if sums.get(item.file) != item.sha256:
            problems.append(
                Problem(
                    f"{item.file}: sha256 differs from {SUMS} or is not listed there",
                    file=file,
                    path=f"{where}.sha256",
                )
            )
    if problems:
        raise IntegrityError(
            f"inconsistent bundle: {root}",
            problems=problems,
            hint="rebuild it with `kvenv bundle`",
        )


def _verify_files(root: Path, sums: dict[str, str], *, jobs: int) -> None:
    def check(item: tuple[str, str]) -> Problem | None:
        rel, expected = item
        path = root / rel
        try:
            info = os.lstat(path)
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode):
            return Problem(f"{rel}: missing (or not a regular file)", file=str(path))
        actual = sha256_file(path)[0]
        if actual != expected:
            return Problem(sha_mismatch(str(path), expected, actual).message, file=str(path))
        return None

    checked = thread_map(check, sorted(sums.items()), jobs, "kvenv-verify")
    problems = [p for p in checked if p is not None]
    if problems:
        raise IntegrityError(
            f"bundle {root} does not match its {SUMS}: {len(problems)} file(s) differ",
            problems=problems,
            hint="the bundle is corrupt or was changed; copy it again or rebuild it",
        )
