"""A wheelhouse of distributions installed in this interpreter, made without the network, and
a copy of this checkout's files: what a test needs to install kvenv somewhere new offline.

Tests that install kvenv somewhere new (pre-commit's own environment for a hook repository)
need kvenv's dependencies as wheels; :func:`repack_installed` writes each installed
distribution of a requirement closure back into a wheel: its files under site-packages as
``RECORD`` lists them (``__pycache__``, the installer's own files and anything outside
site-packages, such as console scripts, left out: pip writes scripts again from
``entry_points.txt``), its ``WHEEL`` file's first tag naming the file, a fresh ``RECORD``.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import REPO

_SKIP_META = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def closure(requirements: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, transitively (extras followed)."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(Requirement(r), "") for r in requirements]
    while pending:
        requirement, extra = pending.pop()
        environment = {**default_environment(), "extra": extra}
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        extras = sorted(requirement.extras)
        if name in found and not extras:
            continue
        dist = found.get(name) or metadata.distribution(requirement.name)
        found[name] = dist
        for line in dist.requires or ():
            child = Requirement(line)
            for wanted in ["", *extras]:
                pending.append((child, wanted))
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dist: metadata.Distribution, directory: Path) -> Path:
    """``dist`` (installed) written back as a wheel into ``directory``."""
    site = Path(str(dist.locate_file("")))
    entries: list[tuple[str, bytes]] = []
    dist_info = ""
    for file in dist.files or ():
        relative = file.as_posix()
        parts = relative.split("/")
        if relative.startswith("..") or "__pycache__" in parts:
            continue
        if parts[0].endswith(".dist-info"):
            dist_info = parts[0]
            if parts[-1] in _SKIP_META:
                continue
        path = site / relative
        if path.is_file():
            entries.append((relative, path.read_bytes()))
    assert dist_info, f"{dist.metadata['Name']}: no .dist-info in its RECORD"
    wheel_meta = (site / dist_info / "WHEEL").read_text(encoding="utf-8")
    tag = re.search(r"^Tag: (\S+)$", wheel_meta, flags=re.MULTILINE)
    assert tag is not None, f"{dist_info}/WHEEL names no tag"
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    target = directory / f"{name}-{dist.version}-{tag.group(1)}.whl"
    directory.mkdir(parents=True, exist_ok=True)
    record = [f"{path},{_digest(data)},{len(data)}" for path, data in entries]
    record.append(f"{dist_info}/RECORD,,")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in entries:
            archive.writestr(path, data)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return target


def repack_installed(requirements: Iterable[str], directory: Path) -> list[Path]:
    """Every installed distribution ``requirements`` need, as wheels in ``directory``."""
    return [repack(dist, directory) for dist in closure(requirements)]


def copy_checkout(directory: Path) -> Path:
    """This checkout's files as ``git ls-files`` lists them (tracked and untracked, ignored
    ones left out), copied into ``directory``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, directory / name)
    return directory
