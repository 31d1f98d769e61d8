"""Installing one wheel safely, with PyPA ``installer``'s formats and a fast writer.

Every zip entry is checked *before* anything is written: paths that escape the target
(``..``, absolute, drive letters, backslashes), links, devices and other special files,
duplicate names, unknown ``.data`` schemes, an unsupported ``Wheel-Version``, a missing, huge or
lying ``RECORD`` (files missing from it, entries without hash or size, weak hash algorithms,
entries naming files the archive lacks), and any file that would land in a protected package's
import names (``torch/``, ``torch.py``, ``torch-*.dist-info``...). What ``installer``'s own
``validate_record`` checks is part of these (RECORD listing a hash for itself, or listing its
signature files, is refused too), so RECORD is parsed once.

Then each member is read with ``os.pread`` from the wheel, inflated with zlib, hashed once with
sha256 and written with ``os.write`` to a file created exclusively (never overwriting). That one
digest is checked against ``RECORD`` *and* becomes the installed ``RECORD``'s entry, so nothing is
decompressed or hashed twice; a small member (nearly all of them) is checked before its file is
even created. Console-script launchers (``installer.scripts.Script``), shebang
rewriting (``installer.utils.fix_shebang``) and the installed ``RECORD``'s layout are
``installer``'s. A wheel over ``SPLIT_BYTES`` is written by several threads (zlib, hashlib and
file writes release the GIL). A mismatch removes every file this call wrote, so a failed
install leaves the target as it was. The one relaxation is the caller's to make: for a wheel
named in ``record_waivers`` (the profile's ``[[overlay.record_waivers]]``) a file whose hash or
size differs from RECORD is installed and reported (``InstalledDist.record_waived``); the
installed RECORD lists the actual digest either way, and every structural check still applies.
The lines of top-level ``.pth`` files that ``site`` would execute (``import ...``) are reported
in ``InstalledDist.executable_pth``; whether they may be installed is the store's to decide.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import os
import re
import stat
import struct
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import attrs
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from kvenv._util.importnames import fold, import_name_of, protected_import_names
from kvenv._util.progress import Progress
from kvenv.env.linking import new_dir
from kvenv.env.manifest import ExecutablePth, RecordMismatch
from kvenv.errors import InstallError, IntegrityError

SCHEMES = ("purelib", "platlib", "scripts", "data", "headers")
MAX_RECORD_BYTES = 64 << 20
MAX_ENTRIES = 500_000
STRONG_HASHES = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512"})
# Import names a protected distribution owns beyond its own canonical name.
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
    # RECORD hash/size lies accepted because the wheel's RECORD was waived (archive paths)
    record_waived: tuple[RecordMismatch, ...] = ()
    # lines of its top-level .pth files that site executes at start-up (import ...)
    executable_pth: tuple[ExecutablePth, ...] = ()


def check_entry_name(name: str) -> str | None:
    """Why a zip entry name is unsafe, or None."""
    if not name or "\x00" in name:
        return "empty name or NUL byte"
    if "\\" in name:
        return "backslash in path"
    if name.startswith("/") or _DRIVE.match(name):
        return "absolute path"
    parts = (name[:-1] if name.endswith("/") else name).split("/")
    if "" in parts or "." in parts or ".." in parts:
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
class _WheelFacts:
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


def inspect_wheel(zf: zipfile.ZipFile, filename: str, protected: Iterable[str] = ()) -> _WheelFacts:
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
    if records.get(record_path, ("", "", -1)) != ("", "", -1):
        raise _bad(where, "RECORD lists a hash or size for itself")
    signatures = {f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"}
    files = [i.filename for i in infos if not i.is_dir()]
    for path in files:
        entry = records.get(path)
        if path in signatures:
            if entry is not None:
                raise _bad(where, f"RECORD lists its own signature file {path!r}")
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
    allowed: set[str] = set()  # top-level names already found not protected
    for path in files:
        site_path = _site_relative(path, data_dir, where)
        if site_path is None:
            continue
        first = site_path.split("/", 1)[0]
        if first in allowed:
            pass
        elif import_name_of(first) not in protected_names:
            allowed.add(first)
        else:
            raise _bad(
                where,
                f"{path!r} would land in the protected package {first!r}; protected "
                "packages are never written or shadowed",
            )
        if not first.endswith((".dist-info", ".pth")):
            top_level.add(first if "/" in site_path else first.split(".", 1)[0])
    return _WheelFacts(
        name=name,
        version=di_version or str(version),
        dist_info=dist_info,
        data_dir=data_dir,
        root_is_purelib=bool(purelib),
        records=records,
        top_level=tuple(sorted(top_level)),
    )


def executable_pth_lines(text: str) -> list[str]:
    """The lines of a ``.pth`` file that ``site`` executes: as ``site.addpackage`` decides, a
    line (not stripped first) that starts with ``import`` and a space or tab."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # universal newlines
    return [line for line in lines if line.startswith(("import ", "import\t"))]


def _executable_pth(zf: zipfile.ZipFile, facts: _WheelFacts, where: str) -> list[ExecutablePth]:
    """The executable lines of the wheel's ``.pth`` files that land at the top of a site
    directory (the only ones ``site`` reads), with their RECORD paths."""
    out: list[ExecutablePth] = []
    for info in zf.infolist():
        if info.is_dir() or not info.filename.endswith(".pth"):
            continue
        site_path = _site_relative(info.filename, facts.data_dir, where)
        if site_path is None or "/" in site_path:
            continue
        text = zf.read(info).decode("utf-8", errors="replace")
        out.extend(
            ExecutablePth(facts.name, site_path, line) for line in executable_pth_lines(text)
        )
    return out


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


# Compressed bytes read, and inflated bytes produced, per step: most members take one step; a
# large one goes in pieces that stay in cache between inflating, hashing and writing (bigger
# pieces cost more: each step copies the unconsumed input), and memory stays flat. Measured on
# the 12 largest wheels of the vLLM closure (1.2 GB): 256 KiB / 1 MiB held the peak RSS at 65
# MiB where 1 MiB / 4 MiB took 92-96 MiB (each thread's pieces and its malloc arena), for the
# same CPU.
READ_CHUNK = 256 << 10
OUT_CHUNK = 1 << 20
SPLIT_BYTES = 64 << 20  # a wheel this large (uncompressed) is written by several threads
_LOCAL_MAGIC = b"PK\x03\x04"
# A small member (at most READ_CHUNK compressed and OUT_CHUNK inflated) is read with its local
# header in one ``pread`` that also covers up to this many bytes of the header's extra field.
_HEADER_SLACK = 256


@functools.cache
def _inflate_lib() -> tuple[Callable[[int], Any], tuple[type[Exception], ...]]:
    """``decompressobj`` and its errors: ISA-L's (about twice as fast as zlib's inflate, same
    API and results) where the ``isal`` package is installed, else the standard library's."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.decompressobj, (zlib.error,)
    error: object = isal_zlib.error  # its stub calls it an instance; it is a class
    if not (isinstance(error, type) and issubclass(error, Exception)):
        return zlib.decompressobj, (zlib.error,)
    return isal_zlib.decompressobj, (error, zlib.error)


def _mismatch(label: str) -> IntegrityError:
    return IntegrityError(
        f"wheel content does not match its RECORD: {label}",
        hint="the wheel was altered after it was built; nothing was installed (a wheel "
        "published with a wrong RECORD can be waived in the profile: "
        "[[overlay.record_waivers]] with a reason)",
    )


def is_small(info: zipfile.ZipInfo) -> bool:
    """Whether a member is read and inflated in one step (nearly every member of a wheel):
    at most ``READ_CHUNK`` compressed and ``OUT_CHUNK`` inflated, deflated or stored."""
    return (
        info.compress_size <= READ_CHUNK
        and info.file_size <= OUT_CHUNK
        and info.compress_type in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED)
    )


class _Archive:
    """Reads members straight from the wheel's file descriptor with ``os.pread``: no shared
    file position, so threads read members of one wheel at once. A small member is one read
    and one inflate; a large one goes in bounded pieces. Every member's inflated length must be
    exactly its declared size."""

    def __init__(self, path: Path, fd: int, where: str) -> None:
        self.path = path
        self.fd = fd
        self.length = os.fstat(fd).st_size
        self.where = where

    def pieces(self, info: zipfile.ZipInfo) -> Iterable[bytes]:
        if info.flag_bits & 0x1:
            raise _bad(self.where, f"entry {info.filename!r} is encrypted")
        if is_small(info):
            return self._small(info)
        start = self._data_offset(info)
        if info.compress_type == zipfile.ZIP_DEFLATED:
            return self._inflate(info, start)
        if info.compress_type == zipfile.ZIP_STORED:
            return self._stored(info, start)
        return self._other(info)

    def _data_offset(
        self, info: zipfile.ZipInfo, head: bytes | None = None, name: bytes | None = None
    ) -> int:
        """Where the member's data starts, once its local header is checked (``head``: bytes
        read from the header on, when the caller read them already; ``name``: the member's
        name as stored, when the caller encoded it already)."""
        if name is None:
            name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
        if head is None:
            head = os.pread(self.fd, 30 + len(name), info.header_offset)
        if head[:4] != _LOCAL_MAGIC or head[30 : 30 + len(name)] != name:
            raise _bad(self.where, f"entry {info.filename!r}: local header does not match")
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        start: int = info.header_offset + 30 + name_len + extra_len
        if start + info.compress_size > self.length:
            raise _bad(self.where, f"entry {info.filename!r} is truncated")
        return start

    def _small(self, info: zipfile.ZipInfo) -> tuple[bytes]:
        return (self.small_data(info),)

    def small_data(self, info: zipfile.ZipInfo) -> bytes:
        """A small member (see :func:`is_small`) in one piece: its local header and data in
        one ``pread`` (a second one only when the header's extra field is longer than
        ``_HEADER_SLACK``), inflated in one step that stops one byte past the declared size."""
        if info.flag_bits & 0x1:
            raise _bad(self.where, f"entry {info.filename!r} is encrypted")
        name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
        block = os.pread(
            self.fd, 30 + len(name) + _HEADER_SLACK + info.compress_size, info.header_offset
        )
        start = self._data_offset(info, block, name) - info.header_offset
        data = block[start : start + info.compress_size]
        if len(data) != info.compress_size:  # a long extra field: read the data itself
            data = os.pread(self.fd, info.compress_size, info.header_offset + start)
            if len(data) != info.compress_size:
                raise _bad(self.where, f"entry {info.filename!r} is truncated")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.compress_size != info.file_size:
                raise _mismatch(f"{self.where}: {info.filename}")
            return data
        decompressobj, errors = _inflate_lib()
        inflater = decompressobj(-15)
        try:
            out: bytes = inflater.decompress(data, info.file_size + 1)
        except errors as exc:
            raise _bad(self.where, f"entry {info.filename!r}: corrupt data ({exc})") from None
        if len(out) != info.file_size or not inflater.eof:
            raise _mismatch(f"{self.where}: {info.filename}")
        return out

    def _stored(self, info: zipfile.ZipInfo, start: int) -> Iterator[bytes]:
        if info.compress_size != info.file_size:
            raise _mismatch(f"{self.where}: {info.filename}")
        for offset in range(0, info.file_size, READ_CHUNK):
            count = min(READ_CHUNK, info.file_size - offset)
            data = os.pread(self.fd, count, start + offset)
            if len(data) != count:
                raise _bad(self.where, f"entry {info.filename!r} is truncated")
            yield data

    def _inflate(self, info: zipfile.ZipInfo, start: int) -> Iterator[bytes]:
        decompressobj, errors = _inflate_lib()
        inflater = decompressobj(-15)
        size, got = info.file_size, 0
        position, end = start, start + info.compress_size
        data = b""
        try:
            while not inflater.eof:
                if not data and position < end:
                    data = os.pread(self.fd, min(READ_CHUNK, end - position), position)
                    position += len(data)
                out = inflater.decompress(data, min(OUT_CHUNK, size - got + 1))
                data = inflater.unconsumed_tail
                got += len(out)
                if got > size:
                    raise _mismatch(f"{self.where}: {info.filename}")
                if out:
                    yield out
                elif not data and position >= end:
                    break  # input used up and nothing more comes out: truncated stream
        except errors as exc:
            raise _bad(self.where, f"entry {info.filename!r}: corrupt data ({exc})") from None
        if got != size or not inflater.eof:
            raise _mismatch(f"{self.where}: {info.filename}")

    def _other(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """bzip2 and lzma members (rare in wheels): zipfile streams them, checking the CRC."""
        with zipfile.ZipFile(self.path) as zf, zf.open(info) as stream:
            while data := stream.read(READ_CHUNK):
                yield data


class _Row(NamedTuple):
    """One row of the installed RECORD: the path is relative to its scheme's directory."""

    scheme: str
    path: str
    digest: str  # urlsafe base64 sha256, no padding
    size: int


class _Writer:
    """Creates files exclusively (never overwriting), remembering every file and directory it
    made so a failure can remove exactly those. Directories are created once, from a set, each
    with one ``mkdir`` when its parent exists. With ``read_only`` every file is created without
    write permission (its descriptor still writes): the modes the store's seal wants, with no
    ``chmod`` afterwards."""

    def __init__(self, schemes: dict[str, str], read_only: bool = False) -> None:
        self.schemes = schemes
        self.known_dirs: set[str] = set()
        self.created_files: list[str] = []
        self.created_dirs: list[str] = []
        self.failed = False
        self.modes = (0o444, 0o555) if read_only else (0o666, 0o777)

    def write(
        self,
        scheme: str,
        path: str,
        pieces: Iterable[bytes],
        executable: bool,
        *,
        checked: bool = False,
    ) -> _Row:
        """Write ``pieces`` to ``path`` of ``scheme``; ``checked`` says the path is an archive
        member's (every one was checked by :func:`inspect_wheel`), else it is checked here."""
        if not checked:
            reason = check_entry_name(path)
            if reason:  # generated names (scripts, entry points) are checked here
                raise ValueError(f"refusing to write {path!r}: {reason}")
        fd = self._create(scheme, path, executable)
        digest = hashlib.sha256()
        size = 0
        try:
            for piece in pieces:
                digest.update(piece)
                size += len(piece)
                _write_all(fd, piece)
        finally:
            os.close(fd)
        return _Row(scheme, path, _b64(digest.digest()), size)

    def write_member(self, scheme: str, path: str, data: bytes, executable: bool) -> None:
        """Write a member's bytes, already hashed and checked by the caller, to ``path`` of
        ``scheme`` (an archive member's path: :func:`inspect_wheel` checked it)."""
        fd = self._create(scheme, path, executable)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    def _create(self, scheme: str, path: str, executable: bool) -> int:
        """A new file (never an existing one) at ``path`` of ``scheme``, its parents made."""
        full = f"{self.schemes[scheme]}/{path}"
        parent = full.rpartition("/")[0]
        if parent not in self.known_dirs:
            self._make_dirs(parent)
        fd = os.open(full, _CREATE, self.modes[executable])
        self.created_files.append(full)
        return fd

    def _make_dirs(self, directory: str) -> None:
        """``directory`` and any missing parents, one ``mkdir`` each; the ones made here are
        remembered (another thread may make the same one first: then it is not ours)."""
        try:
            made = new_dir(directory)
        except FileNotFoundError:
            self._make_dirs(os.path.dirname(directory))
            made = new_dir(directory)
        if made:
            self.created_dirs.append(directory)
        self.known_dirs.add(directory)

    def rollback(self) -> None:
        for path in self.created_files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
        # deepest first: threads may have recorded a child before its parent
        for directory in sorted(set(self.created_dirs), key=len, reverse=True):
            try:
                os.rmdir(directory)
            except OSError:
                continue


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    done = os.write(fd, data)
    if done != len(data):
        view = memoryview(data)[done:]
        while view:
            view = view[os.write(fd, view) :]


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class _Verified:
    """One member's RECORD entry; ``wrap`` hashes its pieces with the RECORD's algorithm as
    they pass when that is not sha256 (the written file's sha256 is computed by the writer,
    so a sha256 entry costs no second hash); ``matches`` compares digest and size."""

    def __init__(self, expected: tuple[str, str, int]) -> None:
        self.algorithm, self.value, self.size = expected
        self.hash = None if self.algorithm == "sha256" else hashlib.new(self.algorithm)

    def wrap(self, pieces: Iterable[bytes]) -> Iterable[bytes]:
        return pieces if self.hash is None else self._hashed(pieces, self.hash)

    @staticmethod
    def _hashed(pieces: Iterable[bytes], hash_: Any) -> Iterator[bytes]:
        for piece in pieces:
            hash_.update(piece)
            yield piece

    def digest(self, row: _Row) -> str:
        return row.digest if self.hash is None else _b64(self.hash.digest())

    def matches(self, row: _Row) -> bool:
        return self.digest(row) == self.value and row.size == self.size

    def mismatch(self, path: str, row: _Row) -> RecordMismatch:
        return RecordMismatch(
            file=path,
            expected=f"{self.algorithm}={self.value},{self.size}",
            actual=f"{self.algorithm}={self.digest(row)},{row.size}",
        )


def _with_crc(pieces: Iterable[bytes], info: zipfile.ZipInfo, label: str) -> Iterator[bytes]:
    """For members RECORD does not hash: zip's CRC-32 then guards the bytes."""
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        yield piece
    if crc != info.CRC:
        raise IntegrityError(f"wheel member fails its CRC check: {label}")


@attrs.frozen
class _Job:
    """What every member write of one wheel needs."""

    archive: _Archive
    facts: _WheelFacts
    writer: _Writer
    root_scheme: str
    interpreter: str
    verify: bool
    waive_record: bool = False  # accept RECORD hash/size lies, collecting them in ``waived``
    waived: list[RecordMismatch] = attrs.field(factory=list)


def _check_row(job: _Job, verified: _Verified, path: str, row: _Row, label: str) -> None:
    """Refuse a member whose bytes differ from its RECORD entry, unless the wheel's RECORD is
    waived: then the mismatch is collected (the installed RECORD lists the actual digest)."""
    if verified.matches(row):
        return
    if not job.waive_record:
        raise _mismatch(label)
    job.waived.append(verified.mismatch(path, row))


def _install_member(job: _Job, info: zipfile.ZipInfo) -> _Row:
    facts, label = job.facts, f"{job.archive.where}: {info.filename}"
    path = info.filename
    scheme = job.root_scheme
    if path.startswith(facts.data_dir + "/"):
        scheme, _, path = path[len(facts.data_dir) + 1 :].partition("/")
    mode = info.external_attr >> 16
    executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
    expected = facts.records.get(info.filename, ("", "", -1))
    if job.verify and expected[0] == "sha256" and scheme != "scripts" and is_small(info):
        # Nearly every member: read, inflated and hashed in memory, checked against RECORD
        # before its file is created, written in one call.
        data = job.archive.small_data(info)
        row = _Row(scheme, path, _b64(hashlib.sha256(data).digest()), len(data))
        if row.digest != expected[1] or row.size != expected[2]:
            _check_row(job, _Verified(expected), info.filename, row, label)
        job.writer.write_member(scheme, path, data, executable)
        return row
    pieces: Iterable[bytes] = job.archive.pieces(info)
    verified: _Verified | None = None
    if job.verify and expected[0]:
        verified = _Verified(expected)
        pieces = verified.wrap(pieces)
    else:
        pieces = _with_crc(pieces, info, label)
    if scheme == "scripts":
        return _install_script(job, path, pieces, verified, executable, info.filename)
    row = job.writer.write(scheme, path, pieces, executable, checked=True)
    if verified is not None:
        _check_row(job, verified, info.filename, row, label)
    return row


def _install_script(
    job: _Job,
    path: str,
    pieces: Iterable[bytes],
    verified: _Verified | None,
    executable: bool,
    member: str,
) -> _Row:
    """A ``.data/scripts`` file: checked as shipped, written with the interpreter's shebang."""
    from installer.utils import fix_shebang

    data = b"".join(pieces)
    if verified is not None:
        shipped = _Row("scripts", path, _b64(hashlib.sha256(data).digest()), len(data))
        _check_row(job, verified, member, shipped, f"{job.archive.where}: {member}")
    with fix_shebang(io.BytesIO(data), job.interpreter) as fixed:
        content = fixed.read()
    return job.writer.write("scripts", path, (content,), executable)


def _entry_point_scripts(zf: zipfile.ZipFile, job: _Job) -> list[_Row]:
    from installer.scripts import Script
    from installer.utils import parse_entrypoints

    name = f"{job.facts.dist_info}/entry_points.txt"
    if name not in zf.NameToInfo:
        return []
    rows = []
    text = _read_text(zf, name, job.archive.where)
    for script_name, module, attr, section in parse_entrypoints(text):
        launcher, data = Script(script_name, module, attr, section).generate(
            job.interpreter, "posix"
        )
        rows.append(job.writer.write("scripts", launcher, (data,), True))
    return rows


def _members(zf: zipfile.ZipFile, facts: _WheelFacts) -> list[zipfile.ZipInfo]:
    """The members to write: files, less RECORD (written fresh) and ``__pycache__`` entries
    (a security risk that ``installer`` skips too)."""
    record_path = f"{facts.dist_info}/RECORD"
    return [
        info
        for info in zf.infolist()
        if not info.is_dir()
        and info.filename != record_path
        and "__pycache__" not in info.filename.split("/")[:-1]
    ]


def _write_members(
    job: _Job,
    members: list[zipfile.ZipInfo],
    jobs: int,
    progress: Callable[[int], None] | None = None,
) -> list[_Row]:
    def run(group: list[zipfile.ZipInfo]) -> list[_Row]:
        out = []
        for info in group:
            if job.writer.failed:
                break  # another thread failed: the install is rolled back
            try:
                out.append(_install_member(job, info))
            except BaseException:
                job.writer.failed = True
                raise
            if progress is not None:
                progress(info.file_size)
        return out

    total = sum(info.file_size for info in members)
    if jobs <= 1 or total < SPLIT_BYTES:
        return run(members)
    groups: list[list[zipfile.ZipInfo]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for info in sorted(members, key=lambda i: -i.file_size):
        index = loads.index(min(loads))
        groups[index].append(info)
        loads[index] += info.file_size + 4096

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs, thread_name_prefix="kvenv-member") as pool:
        futures = [pool.submit(run, group) for group in groups if group]
    return [row for future in futures for row in future.result()]


def _record_text(
    rows: list[_Row], record_path: str, schemes: dict[str, str], root: str
) -> tuple[str, list[str], list[str]]:
    """The installed RECORD, as ``installer`` writes it: sorted by path, other schemes with a
    prefix relative to the root scheme, RECORD itself without hash and size. With it, its
    paths in order and the absolute path each one lands at."""
    import csv

    out = io.StringIO()
    writer = csv.writer(out, delimiter=",", quotechar='"', lineterminator="\n")
    prefixes = {
        scheme: ("" if scheme == root else os.path.relpath(schemes[scheme], schemes[root]) + "/")
        for scheme in schemes
    }
    entries = [(row.path, row.scheme, f"sha256={row.digest}", str(row.size)) for row in rows]
    entries.append((record_path, root, "", ""))
    paths: list[str] = []
    landed: list[str] = []
    for path, scheme, hash_, size in sorted(entries, key=lambda e: e[0]):
        writer.writerow((prefixes[scheme] + path, hash_, size))
        paths.append(prefixes[scheme] + path)
        landed.append(f"{schemes[scheme]}/{path}")
    return out.getvalue(), paths, landed


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
    record_waivers: Iterable[str] = (),
    jobs: int = 1,
    progress: Progress | None = None,
    read_only: bool = False,
) -> InstalledDist:
    """Install ``wheel`` into ``target`` (the import root) and return what was installed.

    Console scripts go to ``bin_dir`` (default ``<target>/bin``) with a shebang for ``python``
    (default: this interpreter); ``.data/data`` to ``data_dir`` (default ``target``) and headers
    to ``include_dir/<name>`` (default ``<target>/include``). An existing file is never
    overwritten. A wheel of more than ``SPLIT_BYTES`` is written by ``jobs`` threads. When the
    wheel's distribution is named in ``record_waivers``, a file whose hash or size differs from
    its RECORD entry is installed and reported in ``record_waived`` (every structural check
    still applies). ``progress`` hears ``("unpack <wheel file name>", bytes written, bytes in
    all)`` as the wheel's files are written. With ``read_only`` every file is created without
    write permission (the store's entries are sealed read-only). Raises
    :class:`IntegrityError` for an unsafe wheel and :class:`InstallError` when writing fails;
    in both cases every file this call wrote is removed again.
    """
    from installer.exceptions import InstallerError

    wheel = Path(wheel)
    target = Path(os.path.abspath(target))
    protected = tuple(protected)
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise IntegrityError(f"not a readable wheel: {wheel}: {exc}") from None
    with zf:
        facts = inspect_wheel(zf, wheel.name, protected)
        hooks = _executable_pth(zf, facts, wheel.name)
        scripts = os.path.abspath(bin_dir) if bin_dir else str(target / "bin")
        include = os.path.abspath(include_dir) if include_dir else str(target / "include")
        schemes = {
            "purelib": str(target),
            "platlib": str(target),
            "scripts": scripts,
            "data": os.path.abspath(data_dir) if data_dir else str(target),
            "headers": os.path.join(include, facts.name),
        }
        root = "purelib" if facts.root_is_purelib else "platlib"
        writer = _Writer(schemes, read_only)
        record_path = f"{facts.dist_info}/RECORD"
        try:
            fd = os.open(wheel, os.O_RDONLY | os.O_CLOEXEC)
            try:
                archive = _Archive(wheel, fd, wheel.name)
                waive = fold(facts.name) in {fold(n) for n in record_waivers}
                job = _Job(
                    archive,
                    facts,
                    writer,
                    root,
                    python or sys.executable,
                    verify_record,
                    waive_record=waive,
                )
                rows = _entry_point_scripts(zf, job)
                members = _members(zf, facts)
                rows += _write_members(
                    job, members, jobs, _byte_counter(f"unpack {wheel.name}", members, progress)
                )
            finally:
                os.close(fd)
            installer_file = f"{facts.dist_info}/INSTALLER"
            rows.append(writer.write(root, installer_file, (b"kvenv\n",), False))
            text, files, landed = _record_text(rows, record_path, schemes, root)
            record = text.encode("utf-8")
            writer.write(root, record_path, (record,), False)
        except BaseException as exc:
            writer.rollback()
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
    script_names = tuple(
        sorted(path.rpartition("/")[2] for path in landed if path.startswith(scripts + "/"))
    )
    return InstalledDist(
        name=facts.name,
        version=facts.version,
        dist_info=facts.dist_info,
        record_digest="sha256:" + hashlib.sha256(record).hexdigest(),
        top_level=facts.top_level,
        scripts=script_names,
        files=tuple(files),
        record_waived=tuple(sorted(job.waived, key=lambda m: m.file)),
        executable_pth=tuple(hooks),
    )


def _byte_counter(
    label: str, members: list[zipfile.ZipInfo], progress: Progress | None
) -> Callable[[int], None] | None:
    """A thread-safe adder that reports the bytes written so far as ``progress(label, done,
    total)``; None without ``progress``."""
    if progress is None:
        return None
    import threading

    total = sum(info.file_size for info in members)
    lock = threading.Lock()
    done = [0]
    progress(label, 0, total)

    def add(size: int) -> None:
        with lock:
            done[0] += size
            now = done[0]
        progress(label, now, total)

    return add
