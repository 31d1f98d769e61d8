"""``kvenv export``: a profile's lock as pins another installer uses from a checkout.

- ``requirements-txt``: one ``name==version --hash=sha256:...`` per locked package (with its
  marker), for ``pip install --require-hashes --no-deps -r``; with ``urls``, ``name @ URL``
  instead (where the wheel is, from the page cache or the index). The native wheel is
  exported by its pinned source: an index pin by name and version, a URL or Hub pin by its
  URL, a path pin by its path.
- ``pylock``: PEP 751 with every wheel named by ``url`` (or a ``path`` that exists from the
  exported file), never the ``../wheels/`` paths of a portable lock, which only a bundle has:
  ``uv pip install -r pylock.NAME.toml`` works from a checkout.

What the host provides (protected packages, host packages the lock relies on) is not in the
lock and is not exported; a comment names it. Locating wheels is the caller's ``locate``
(:class:`kvenv.fetch.locate.Locator`), so the rendering here is pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from kvenv.errors import InputError

__all__ = ["LeftOut", "Located", "export_pylock", "export_requirements", "native_location"]

# where a wheel is: (project name, file name, sha256) -> an https URL or a local file
Located = Callable[[str, str, str], "str | Path"]


@attrs.frozen
class LeftOut:
    """A package the host provides, left out of the export (``version``: the host's)."""

    name: str
    version: str | None = None
    protected: bool = False

    def describe(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


def _wheel(package: Any) -> Any:
    wheels: Sequence[Any] = package.wheels or ()
    if len(wheels) != 1:
        raise InputError(
            f"{package.name} has {len(wheels)} wheels in the lock; kvenv locks exactly one",
            hint="relock with `kvenv lock`",
        )
    return wheels[0]


def _is_native(tool: Any) -> bool:
    return bool(tool is not None and tool.native)


def native_location(source: Any, resolve: Callable[[str], Path]) -> str | Path | None:
    """Where the profile's native wheel is by its pinned ``[native.source]``: a URL pin's URL,
    a Hub pin's resolve URL at its commit, a path pin's file (``resolve``: against the
    project); None for an index pin (found on the index like the rest)."""
    if source is None:
        return None
    if source.kind == "url":
        return str(source.url)
    if source.kind == "hf":
        from kvenv.lock.pylock import hub_resolve_url

        return hub_resolve_url(source)
    if source.kind == "path":
        return resolve(str(source.path))
    return None


def _where(
    package: Any, wheel: Any, lock_dir: Path, locate: Located | None, pinned: str | Path | None
) -> str | Path:
    """Where a locked wheel is, for an installer in a checkout: the native pin's source
    (``pinned``), its recorded URL, a recorded path that exists, else where ``locate`` finds
    it."""
    if pinned is not None:
        return pinned
    if wheel.url:
        return str(wheel.url)
    if wheel.path:
        local = (lock_dir / str(wheel.path)).resolve()
        if local.is_file():
            return local
    sha256 = str(wheel.hashes.get("sha256", ""))
    if locate is None:
        raise InputError(
            f"{wheel.filename} has no URL in the lock and is not on disk",
            hint="let kvenv look it up on the index (drop --offline, or give --index-url)",
        )
    location: str | Path = locate(str(package.name), wheel.filename, sha256)
    return location


def _header(lock_path: Path, profile: str, left_out: Sequence[LeftOut], how: str) -> list[str]:
    lines = [
        f"# Exported by `kvenv export` from {lock_path.name} (profile {profile}).",
        f"# Install: {how}",
    ]
    protected = [p.describe() for p in left_out if p.protected]
    host = [p.describe() for p in left_out if not p.protected]
    import textwrap

    for title, names in (
        ("Left out, protected on the host (never installed): ", protected),
        ("Left out, provided by the host: ", host),
    ):
        if names:
            text = title + ", ".join(names)
            lines += textwrap.wrap(text, 98, initial_indent="# ", subsequent_indent="#   ")
    return lines


def export_requirements(
    lock: Any,
    *,
    profile: str,
    left_out: Sequence[LeftOut] = (),
    native: str | Path | None = None,
    project_dir: Path,
    locate: Located | None = None,
    urls: bool = False,
    include_native: bool = True,
) -> str:
    """The lock as a hashed requirements file. ``native``: where the native wheel is by its
    pin (:func:`native_location`; None: on the index by name and version); ``project_dir``:
    a local file is written relative to it (install from the project directory)."""
    lock_dir = lock.path.parent
    how = "pip install --require-hashes --no-deps -r THIS_FILE (from the project directory)"
    lines = _header(lock.path, profile, left_out, how)
    for package, tool in zip(lock.pylock.packages, lock.package_tools, strict=True):
        is_native = _is_native(tool)
        if is_native and not include_native:
            continue
        wheel = _wheel(package)
        sha256 = wheel.hashes.get("sha256")
        marker = f" ; {package.marker}" if package.marker else ""
        name, version = str(package.name), str(package.version)
        pinned = native if is_native else None
        if urls or pinned is not None:
            where = _where(package, wheel, lock_dir, locate, pinned)
            if isinstance(where, Path):
                spec = "./" + os.path.relpath(where, project_dir).replace(os.sep, "/")
            else:
                spec = f"{name} @ {where}"
            if is_native:
                lines.append("# the native wheel, by its pinned source")
        else:
            spec = f"{name}=={version}"
            if is_native:
                lines.append("# the native wheel, on the index")
        lines.append(f"{spec}{marker} \\\n    --hash=sha256:{sha256}")
    return "\n".join(lines) + "\n"


def export_pylock(
    lock: Any,
    *,
    profile: str,
    output_dir: Path,
    left_out: Sequence[LeftOut] = (),
    native: str | Path | None = None,
    locate: Located | None = None,
    include_native: bool = True,
) -> str:
    """The lock as a PEP 751 document whose every wheel is a ``url`` (or a ``path`` relative
    to ``output_dir`` that exists), for ``uv pip install -r`` from a checkout."""
    from kvenv.lock.pylock import dumps_lock

    lock_dir = lock.path.parent
    data: Mapping[str, Any] = lock.data
    packages: list[dict[str, Any]] = []
    for raw, package, tool in zip(
        data["packages"], lock.pylock.packages, lock.package_tools, strict=True
    ):
        is_native = _is_native(tool)
        if is_native and not include_native:
            continue
        wheel = _wheel(package)
        entry = {k: v for k, v in raw.items() if k not in ("index", "wheels", "tool")}
        (raw_wheel,) = raw["wheels"]
        exported = {k: v for k, v in raw_wheel.items() if k not in ("url", "path")}
        exported.setdefault("name", wheel.filename)
        where = _where(package, wheel, lock_dir, locate, native if is_native else None)
        if isinstance(where, Path):
            exported["path"] = os.path.relpath(where, output_dir).replace(os.sep, "/")
        else:
            exported["url"] = where
        entry["wheels"] = [exported]
        packages.append(entry)
    document: dict[str, Any] = {k: v for k, v in data.items() if k not in ("packages", "tool")}
    document["created-by"] = "kvenv export"
    document["packages"] = packages
    header = _header(lock.path, profile, left_out, "uv pip install -r THIS_FILE")
    return "\n".join(header) + "\n" + _strip_header(dumps_lock(document))


def _strip_header(text: str) -> str:
    """``text`` without kvenv's "Generated by `kvenv lock`" line (this file is an export)."""
    from kvenv.lock.pylock import HEADER

    return text[len(HEADER) :] if text.startswith(HEADER) else text
