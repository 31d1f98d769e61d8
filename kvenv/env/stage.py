"""``verify-wheel`` and ``stage-wheel``: hash a wheel file and check what a wheel must hold
(a zip archive with one ``.dist-info`` holding METADATA, WHEEL and RECORD, every file as its
RECORD says), and install one wheel without its dependencies into an empty directory (the
reference system's staging, through :func:`kvenv.env.wheelinstall.install_wheel` instead of
``pip --target``)."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from kvenv._util.hashing import sha256_file, sha_mismatch
from kvenv.errors import InputError, UsageError
from kvenv.model.profile import DEFAULT_PROTECTED

_HEX64 = re.compile(r"[0-9a-f]{64}")


@attrs.frozen
class WheelCheck:
    path: Path
    name: str
    version: str
    tags: tuple[str, ...]
    size: int
    sha256: str
    expected: str | None
    problems: tuple[str, ...] = ()  # what the wheel's contents lack or contradict

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "filename": self.path.name,
            "name": self.name,
            "version": self.version,
            "tags": list(self.tags),
            "size": self.size,
            "sha256": self.sha256,
            "expected_sha256": self.expected,
            "match": None if self.expected is None else self.expected == self.sha256,
            "ok": self.ok,
            "problems": list(self.problems),
        }


def normalize_sha256(text: str) -> str:
    """``H``, ``sha256:H``, or a ``sha256sum`` line (``H  file``) -> H, lowercase; a value that
    is not 64 hex characters is a :class:`UsageError`."""
    tokens = text.strip().split()
    token = tokens[0] if tokens else ""
    if token.lower().startswith("sha256:"):
        token = token[len("sha256:") :]
    token = token.lower()
    if not _HEX64.fullmatch(token):
        raise UsageError(
            f"malformed sha256 {text.strip()[:80]!r}: expected 64 hex characters",
            hint="give the digest as printed by `kvenv verify-wheel` or `sha256sum`",
        )
    return token


def _wheel_file(path: Path) -> tuple[str, str, tuple[str, ...]]:
    if not path.exists():
        raise InputError(f"wheel not found: {path}")
    if not path.is_file():
        raise InputError(f"not a file: {path}", hint="give the path of a .whl file")
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise InputError(f"not a wheel file name: {path.name}: {exc}") from None
    return str(name), str(version), tuple(sorted(str(t) for t in tags))


def verify_wheel(path: Path, expected: str | None = None, *, contents: bool = True) -> WheelCheck:
    """Hash ``path`` (streaming); raise :class:`IntegrityError` when ``expected`` differs and
    :class:`InputError` when it is not a zip archive. With ``contents``, the check also lists
    what the archive lacks or contradicts (:func:`wheel_problems`)."""
    want = normalize_sha256(expected) if expected is not None else None
    name, version, tags = _wheel_file(path)
    if not zipfile.is_zipfile(path):
        raise _not_a_zip(path)
    digest, size = sha256_file(path)
    if want is not None and digest != want:
        raise sha_mismatch(str(path), want, digest)
    problems = tuple(wheel_problems(path)) if contents else ()
    return WheelCheck(path, name, version, tags, size, digest, want, problems)


def _not_a_zip(path: Path) -> InputError:
    return InputError(
        f"not a wheel: {path} is not a zip archive",
        hint="a wheel is a zip archive: download or build it again",
    )


def wheel_problems(path: Path) -> list[str]:
    """What the wheel at ``path`` lacks (a ``.dist-info`` with METADATA, WHEEL and RECORD, a
    RECORD row for every file) or contradicts (a file whose hash or size differs from its
    RECORD row), one sentence each; empty for a sound wheel."""
    from kvenv.env.wheelinstall import inspect_wheel
    from kvenv.errors import IntegrityError

    try:
        with zipfile.ZipFile(path) as zf:
            try:
                facts = inspect_wheel(zf, path.name)
            except IntegrityError as exc:
                return [exc.message.split(f"{path.name}: ", 1)[-1]]
            problems: list[str] = []
            if f"{facts.dist_info}/METADATA" not in zf.NameToInfo:
                problems.append(f"{facts.dist_info}/METADATA is missing")
            for member, (algorithm, value, size) in sorted(facts.records.items()):
                if size >= 0 and algorithm:
                    problems.extend(_member_problem(zf, member, algorithm, value, size))
            return problems
    except zipfile.BadZipFile as exc:
        raise InputError(f"not a wheel: {path} is not a readable zip archive ({exc})") from None


def _member_problem(
    zf: zipfile.ZipFile, member: str, algorithm: str, value: str, size: int
) -> Iterator[str]:
    """The one sentence saying how ``member`` differs from its RECORD row, if it does."""
    digest = hashlib.new(algorithm)
    count = 0
    try:
        with zf.open(member) as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                count += len(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        yield f"{member}: cannot be read ({exc})"
        return
    actual = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    if actual != value or count != size:
        yield (
            f"{member} differs from its RECORD row: RECORD says {algorithm}={value}, "
            f"{size} bytes; the file has {algorithm}={actual}, {count} bytes"
        )


def stage_wheel(
    path: Path,
    target: Path,
    *,
    expected: str | None = None,
    protected: Iterable[str] = DEFAULT_PROTECTED,
) -> tuple[WheelCheck, str]:
    """Verify ``path`` then install it alone (no dependencies) into ``target``, which must be
    absent or an empty directory. Returns the check and the installed ``.dist-info`` name; a
    failure leaves ``target`` as it was (created and removed again when it was absent)."""
    from kvenv.env.wheelinstall import install_wheel

    if target.exists() and not target.is_dir():
        raise InputError(f"staging target is not a directory: {target}")
    if target.is_dir() and any(target.iterdir()):
        raise InputError(
            f"refusing to overwrite non-empty staging target: {target}",
            hint="give an absent or empty directory; kvenv never merges into one",
        )
    check = verify_wheel(path, expected, contents=False)  # install_wheel checks each file
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    try:
        installed = install_wheel(path, target, protected=protected)
    except BaseException:
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        raise
    return check, installed.dist_info
