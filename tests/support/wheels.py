"""Build small but real wheels for tests (valid zip, METADATA, WHEEL, RECORD with hashes)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.utils import canonicalize_name


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_wheel(
    directory: Path,
    name: str,
    version: str,
    *,
    requires: Iterable[str] = (),
    extras: Mapping[str, Iterable[str]] | None = None,
    requires_python: str | None = None,
    tag: str = "py3-none-any",
    files: Mapping[str, bytes | str] | None = None,
    entry_points: Mapping[str, str] | None = None,
    raw_entries: Mapping[str, bytes] | None = None,
    wheel_version: str = "1.0",
    record: bool = True,
) -> Path:
    """Write ``{name}-{version}-{tag}.whl`` into ``directory`` and return its path.

    ``files`` maps archive paths to content; by default a package ``<name>/__init__.py``
    defining ``__version__``. ``entry_points`` maps console-script names to ``module:func``.
    ``raw_entries`` are written verbatim (not in RECORD), for hostile-wheel tests.
    """
    directory.mkdir(parents=True, exist_ok=True)
    dist = canonicalize_name(name).replace("-", "_")
    dist_info = f"{dist}-{version}.dist-info"
    if files is None:
        files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n"}
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        meta.append(f"Requires-Python: {requires_python}")
    meta.extend(f"Requires-Dist: {r}" for r in requires)
    for extra, reqs in (extras or {}).items():
        meta.append(f"Provides-Extra: {extra}")
        for r in reqs:
            marker = f'extra == "{extra}"'
            sep = " and " if ";" in r else "; "
            if ";" in r:
                base, _, m = r.partition(";")
                meta.append(f"Requires-Dist: {base.strip()}; ({m.strip()}) and {marker}")
            else:
                meta.append(f"Requires-Dist: {r}{sep}{marker}")
    contents: dict[str, bytes] = {
        k: v.encode() if isinstance(v, str) else v for k, v in files.items()
    }
    contents[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    wheel_tags = "\n".join(f"Tag: {t}" for t in _expand(tag))
    contents[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: {wheel_version}\nGenerator: kvenv-tests\n"
        f"Root-Is-Purelib: {'true' if tag.endswith('none-any') else 'false'}\n{wheel_tags}\n"
    ).encode()
    if entry_points:
        lines = ["[console_scripts]"] + [f"{k} = {v}" for k, v in entry_points.items()]
        contents[f"{dist_info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    if record:
        rows = [f"{path},{_record_hash(data)},{len(data)}" for path, data in contents.items()]
        rows.append(f"{dist_info}/RECORD,,")
        contents[f"{dist_info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = directory / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in contents.items():
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
        for arcname, data in (raw_entries or {}).items():
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            zf.writestr(info, data)
    return path


def _expand(tag: str) -> list[str]:
    py, abi, plat = tag.split("-")
    return [
        f"{p}-{a}-{pl}" for p in py.split(".") for a in abi.split(".") for pl in plat.split(".")
    ]
