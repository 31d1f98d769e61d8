"""``verify-wheel`` and ``stage-wheel``: hash a wheel file, and install one wheel without its
dependencies into an empty directory (the reference system's staging, through PyPA
``installer`` via :func:`kvenv.env.wheelinstall.install_wheel` instead of ``pip --target``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
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


def verify_wheel(path: Path, expected: str | None = None) -> WheelCheck:
    """Hash ``path`` (streaming); raise :class:`IntegrityError` when ``expected`` differs."""
    want = normalize_sha256(expected) if expected is not None else None
    name, version, tags = _wheel_file(path)
    digest, size = sha256_file(path)
    if want is not None and digest != want:
        raise sha_mismatch(str(path), want, digest)
    return WheelCheck(path, name, version, tags, size, digest, want)


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
    check = verify_wheel(path, expected)
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    try:
        installed = install_wheel(path, target, protected=protected)
    except BaseException:
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        raise
    return check, installed.dist_info
