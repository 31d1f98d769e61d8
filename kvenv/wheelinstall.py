"""Installing one wheel safely with PyPA ``installer``.

Every zip entry is checked *before* anything is written: paths that escape the target
(``..``, absolute, drive letters, backslashes), links, devices and other special files,
duplicate names, unknown ``.data`` schemes, an unsupported ``Wheel-Version``, a missing, huge or
lying ``RECORD`` (files missing from it, entries without hash or size, weak hash algorithms,
entries naming files the archive lacks), and any file that would land in a protected package's
import names (``torch/``, ``torch.py``, ``torch-*.dist-info``...).

File contents are checked against ``RECORD`` while they are written (one pass: unzip, hash and
write together), rather than in a separate ``validate_record`` pass that would decompress
everything twice; ``installer``'s own ``validate_record`` runs first for the names and entries.
A mismatch removes every file this call wrote, so a failed install leaves the target as it was.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
import sys
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import attrs
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from kvenv.errors import InstallError, IntegrityError

SCHEMES = ("purelib", "platlib", "scripts", "data", "headers")
MAX_RECORD_BYTES = 64 << 20
MAX_ENTRIES = 500_000
STRONG_HASHES = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512"})
# Import names a protected distribution owns beyond its own canonical name.
KNOWN_IMPORT_NAMES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "functorch", "torchgen"),
    "torchvision": ("torchvision",),
    "torchaudio": ("torchaudio",),
}
_DRIVE = re.compile(r"^[A-Za-z]:")


@attrs.frozen
class InstalledDist:
    """What one wheel installed: identity, its RECORD's digest, import names and scripts."""

    name: str
    version: str
    dist_info: str  # the .dist-info directory name
    record_digest: str  # "sha256:<hex>" of the installed RECORD file
    top_level: tuple[str, ...]  # import names at the root of purelib/platlib
    scripts: tuple[str, ...]  # file names written into the scripts directory
    files: tuple[str, ...]  # RECORD paths, relative to the purelib/platlib root


def fold(name: str) -> str:
    """Fold a distribution or import name for comparison: case, '-', '_' and '.' alike."""
    return re.sub(r"[-_.]+", "_", name).lower()


def protected_import_names(protected: Iterable[str]) -> frozenset[str]:
    """The folded import names that the protected distributions own."""
    names: set[str] = set()
    for dist in protected:
        canonical = canonicalize_name(dist)
        names.add(fold(canonical))
        names.update(fold(n) for n in KNOWN_IMPORT_NAMES.get(canonical, ()))
    return frozenset(names)


def import_name_of(component: str) -> str:
    """The import (or distribution) name a top-level entry stands for, folded.

    ``torch`` -> torch, ``torch.py`` / ``torch.cpython-312-x86_64-linux-gnu.so`` -> torch,
    ``torch-2.10.0.dist-info`` -> torch.
    """
    for suffix in (".dist-info", ".egg-info", ".data", ".egg-link"):
        if component.endswith(suffix):
            return fold(component[: -len(suffix)].split("-", 1)[0])
    return fold(component.split(".", 1)[0])


def check_entry_name(name: str) -> str | None:
    """Why a zip entry name is unsafe, or None."""
    if not name or "\x00" in name:
        return "empty name or NUL byte"
    if "\\" in name:
        return "backslash in path"
    if name.startswith("/") or _DRIVE.match(name):
        return "absolute path"
    parts = (name[:-1] if name.endswith("/") else name).split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "path traversal ('..', '.' or empty segment)"
    return None


def _entry_kind_problem(info: zipfile.ZipInfo) -> str | None:
    mode = info.external_attr >> 16
    if not mode:
        return None
    kind = stat.S_IFMT(mode)
    if kind in (0, stat.S_IFREG) or (kind == stat.S_IFDIR and info.is_dir()):
        return None
    if kind == stat.S_IFLNK:
        return "symbolic link"
    return "special file (device, fifo or socket)"


@attrs.frozen
class _Plan:
    """The validated facts about a wheel, gathered before anything is written."""

    name: str
    version: str
    dist_info: str
    data_dir: str
    root_is_purelib: bool
    records: dict[str, tuple[str, str, int]]  # archive path -> (hash name, b64 value, size)
    top_level: tuple[str, ...]


def _parse_record(text: str, where: str) -> dict[str, tuple[str, str, int]]:
    import csv

    out: dict[str, tuple[str, str, int]] = {}
    for index, row in enumerate(csv.reader(text.splitlines())):
        if not row:
            continue
        if len(row) != 3:
            raise _bad(where, f"RECORD row {index + 1} has {len(row)} fields, not 3")
        path, hash_, size = row
        if path in out:
            raise _bad(where, f"RECORD lists {path!r} twice")
        if not hash_:
            out[path] = ("", "", -1)
            continue
        algorithm, _, value = hash_.partition("=")
        if algorithm not in STRONG_HASHES or not value:
            raise _bad(where, f"RECORD entry for {path!r} uses hash {algorithm!r}; need sha256")
        try:
            count = int(size)
        except ValueError:
            raise _bad(where, f"RECORD entry for {path!r} has no valid size") from None
        out[path] = (algorithm, value, count)
    return out


def _bad(where: str, reason: str) -> IntegrityError:
    return IntegrityError(
        f"unsafe or invalid wheel {where}: {reason}",
        hint="nothing was installed; the wheel is malformed or hostile: rebuild or re-pin it",
    )


def inspect_wheel(zf: zipfile.ZipFile, filename: str, protected: Iterable[str] = ()) -> _Plan:
    """Validate every entry of an open wheel; raise :class:`IntegrityError` on the first issue."""
    where = filename
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise _bad(where, f"not a wheel file name ({exc})") from None
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise _bad(where, f"{len(infos)} entries (limit {MAX_ENTRIES})")
    seen: set[str] = set()
    tops: set[str] = set()
    for info in infos:
        reason = check_entry_name(info.filename) or _entry_kind_problem(info)
        if reason:
            raise _bad(where, f"entry {info.filename!r}: {reason}")
        if info.filename in seen:
            raise _bad(where, f"entry {info.filename!r} appears twice")
        seen.add(info.filename)
        tops.add(info.filename.split("/", 1)[0])
    dist_infos = [t for t in tops if t.endswith(".dist-info") and f"{t}/" in _prefixes(seen)]
    if len(dist_infos) != 1:
        raise _bad(where, f"expected exactly one .dist-info directory, found {sorted(dist_infos)}")
    dist_info = dist_infos[0]
    stem = dist_info[: -len(".dist-info")]
    di_name, _, di_version = stem.rpartition("-")
    if canonicalize_name(di_name) != name:
        raise _bad(where, f"{dist_info} does not match the file name's distribution {name}")
    data_dir = f"{stem}.data"
    wheel_meta = _read_text(zf, f"{dist_info}/WHEEL", where)
    version_line = re.search(r"^Wheel-Version:\s*(\S+)", wheel_meta, re.MULTILINE)
    if not version_line or version_line.group(1).split(".")[0] != "1":
        found = version_line.group(1) if version_line else "none"
        raise _bad(where, f"unsupported Wheel-Version {found}; only 1.x is supported")
    purelib = re.search(r"^Root-Is-Purelib:\s*true\s*$", wheel_meta, re.MULTILINE | re.I)
    record_path = f"{dist_info}/RECORD"
    if record_path not in seen:
        raise _bad(where, "RECORD is missing")
    if zf.getinfo(record_path).file_size > MAX_RECORD_BYTES:
        raise _bad(where, f"RECORD is larger than {MAX_RECORD_BYTES} bytes")
    records = _parse_record(_read_text(zf, record_path, where), where)
    signatures = {f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"}
    files = [i.filename for i in infos if not i.is_dir()]
    for path in files:
        entry = records.get(path)
        if path in signatures:
            continue
        if entry is None:
            raise _bad(where, f"{path!r} is not listed in RECORD")
        if path != record_path and entry[2] < 0:
            raise _bad(where, f"RECORD has no hash and size for {path!r}")
    extra = sorted(set(records) - set(files))
    if extra:
        raise _bad(where, f"RECORD lists files the wheel lacks: {', '.join(extra[:5])}")
    protected_names = protected_import_names(protected)
    if fold(name) in protected_names:
        raise _bad(where, f"{name} is a protected host package and is never installed")
    top_level: set[str] = set()
    for path in files:
        site_path = _site_relative(path, data_dir, where)
        if site_path is None:
            continue
        first = site_path.split("/", 1)[0]
        if import_name_of(first) in protected_names:
            raise _bad(
                where,
                f"{path!r} would land in the protected package {first!r}; protected "
                "packages are never written or shadowed",
            )
        if not first.endswith((".dist-info", ".pth")):
            top_level.add(first if "/" in site_path else first.split(".", 1)[0])
    return _Plan(
        name=name,
        version=di_version or str(version),
        dist_info=dist_info,
        data_dir=data_dir,
        root_is_purelib=bool(purelib),
        records=records,
        top_level=tuple(sorted(top_level)),
    )


def _prefixes(names: set[str]) -> set[str]:
    return {n.split("/", 1)[0] + "/" for n in names if "/" in n}


def _site_relative(path: str, data_dir: str, where: str) -> str | None:
    """Where ``path`` lands relative to the import root, or None when not on the import path."""
    if not path.startswith(data_dir + "/"):
        return path
    rest = path[len(data_dir) + 1 :]
    scheme, _, inner = rest.partition("/")
    if scheme not in SCHEMES or not inner:
        raise _bad(where, f"{path!r} is not in a known .data scheme ({', '.join(SCHEMES)})")
    return inner if scheme in ("purelib", "platlib") else None


def _read_text(zf: zipfile.ZipFile, path: str, where: str) -> str:
    try:
        return zf.read(path).decode("utf-8")
    except KeyError:
        raise _bad(where, f"{path} is missing") from None
    except UnicodeDecodeError:
        raise _bad(where, f"{path} is not UTF-8") from None


class _Verifying:
    """A read-only stream that hashes what passes through and checks it against RECORD."""

    def __init__(self, raw: IO[bytes], expected: tuple[str, str, int], label: str) -> None:
        self._raw = raw
        self._algorithm, self._value, self._size = expected
        self._hash = hashlib.new(self._algorithm)
        self._count = 0
        self._label = label

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._hash.update(data)
        self._count += len(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        data = self._raw.readline(size)
        self._hash.update(data)
        self._count += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        if offset != 0 or whence != 0:
            raise OSError("only rewinding is supported")
        self._raw.seek(0)
        self._hash = hashlib.new(self._algorithm)
        self._count = 0
        return 0

    def finish(self) -> None:
        while self.read(1 << 20):
            pass
        value = base64.urlsafe_b64encode(self._hash.digest()).decode().rstrip("=")
        if value != self._value or self._count != self._size:
            raise IntegrityError(
                f"wheel content does not match its RECORD: {self._label}",
                hint="the wheel was altered after it was built; nothing was installed",
            )


def _make_source(zf: zipfile.ZipFile, plan: _Plan, filename: str, verify: bool) -> Any:
    from installer.sources import WheelFile

    class VerifyingWheelFile(WheelFile):
        """installer's WheelFile, streaming each member through a RECORD check."""

        def get_contents(self) -> Iterator[tuple[tuple[str, str, str], BinaryIO, bool]]:
            record_path = f"{plan.dist_info}/RECORD"
            for info in zf.infolist():
                if info.is_dir():
                    continue
                entry = plan.records.get(info.filename, ("", "", -1))
                row = (info.filename, f"{entry[0]}={entry[1]}" if entry[0] else "", "")
                mode = info.external_attr >> 16
                executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
                with zf.open(info) as raw:
                    if not verify or info.filename == record_path or not entry[0]:
                        yield row, cast(BinaryIO, raw), executable
                        continue
                    stream = _Verifying(raw, entry, f"{filename}: {info.filename}")
                    yield row, cast(BinaryIO, stream), executable
                    stream.finish()

    return VerifyingWheelFile(zf)


def _destination_class() -> Any:
    from installer.destinations import SchemeDictionaryDestination
    from installer.records import Hash, RecordEntry
    from installer.utils import copyfileobj_with_hashing, make_file_executable

    class TrackingDestination(SchemeDictionaryDestination):
        """Writes through installer's path checks, remembering every file and directory it
        creates so a failure can remove exactly those."""

        created_files: list[Path]
        created_dirs: list[Path]

        def write_to_fs(self, scheme: Any, path: str, stream: BinaryIO, is_executable: bool) -> Any:
            target = self._path_with_destdir(scheme, path)
            parent = target.parent
            if not parent.is_dir():
                missing = []
                probe = parent
                while not probe.exists():
                    missing.append(probe)
                    probe = probe.parent
                parent.mkdir(parents=True)
                self.created_dirs.extend(reversed(missing))
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            self.created_files.append(target)
            with open(fd, "wb") as out:
                hash_, size = copyfileobj_with_hashing(stream, out, self.hash_algorithm)
            if is_executable:
                make_file_executable(target)
            return RecordEntry(path, Hash(self.hash_algorithm, hash_), size)

    return TrackingDestination


def install_wheel(
    wheel: Path,
    target: Path,
    *,
    protected: Iterable[str] = (),
    python: str | None = None,
    bin_dir: Path | None = None,
    data_dir: Path | None = None,
    include_dir: Path | None = None,
    verify_record: bool = True,
) -> InstalledDist:
    """Install ``wheel`` into ``target`` (the import root) and return what was installed.

    Console scripts go to ``bin_dir`` (default ``<target>/bin``) with a shebang for ``python``
    (default: this interpreter); ``.data/data`` to ``data_dir`` (default ``target``) and headers
    to ``include_dir/<name>`` (default ``<target>/include``). An existing file is never
    overwritten. Raises :class:`IntegrityError` for an unsafe wheel and :class:`InstallError`
    when writing fails; in both cases every file this call wrote is removed again.
    """
    from installer import install
    from installer.exceptions import InstallerError

    wheel = Path(wheel)
    target = Path(os.path.abspath(target))
    protected = tuple(protected)
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise IntegrityError(f"not a readable wheel: {wheel}: {exc}") from None
    with zf:
        plan = inspect_wheel(zf, wheel.name, protected)
        scripts = Path(os.path.abspath(bin_dir)) if bin_dir else target / "bin"
        include = Path(os.path.abspath(include_dir)) if include_dir else target / "include"
        schemes = {
            "purelib": str(target),
            "platlib": str(target),
            "scripts": str(scripts),
            "data": str(Path(os.path.abspath(data_dir)) if data_dir else target),
            "headers": str(include / plan.name),
        }
        destination = _destination_class()(
            scheme_dict=schemes,
            interpreter=python or sys.executable,
            script_kind="posix",
        )
        destination.created_files = []
        destination.created_dirs = []
        source = _make_source(zf, plan, wheel.name, verify_record)
        try:
            source.validate_record(validate_contents=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # skipped __pycache__ entries
                install(source, destination, {"INSTALLER": b"kvenv\n"})
        except BaseException as exc:
            _rollback(destination.created_files, destination.created_dirs)
            if isinstance(exc, IntegrityError):
                raise
            if isinstance(exc, FileExistsError):
                raise InstallError(
                    f"installing {wheel.name} would overwrite {exc.filename or exc}",
                    hint="two wheels provide the same file; nothing of this wheel was installed",
                ) from None
            if isinstance(exc, (InstallerError, ValueError)):
                raise _bad(wheel.name, str(exc)) from None
            if isinstance(exc, OSError):
                raise InstallError(f"installing {wheel.name} failed: {exc}") from None
            raise
        files = _recorded(target, plan)
    record_file = target / plan.dist_info / "RECORD"
    digest = "sha256:" + hashlib.sha256(record_file.read_bytes()).hexdigest()
    script_names = tuple(sorted(Path(f).name for f in files if _is_under(target / f, scripts)))
    return InstalledDist(
        name=plan.name,
        version=plan.version,
        dist_info=plan.dist_info,
        record_digest=digest,
        top_level=plan.top_level,
        scripts=script_names,
        files=files,
    )


def _recorded(target: Path, plan: _Plan) -> tuple[str, ...]:
    import csv

    text = (target / plan.dist_info / "RECORD").read_text(encoding="utf-8")
    return tuple(row[0] for row in csv.reader(text.splitlines()) if row)


def _is_under(path: Path, directory: Path) -> bool:
    return os.path.normpath(path).startswith(str(directory) + os.sep)


def _rollback(files: list[Path], dirs: list[Path]) -> None:
    for path in files:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
    for directory in reversed(dirs):
        try:
            directory.rmdir()
        except OSError:
            continue
