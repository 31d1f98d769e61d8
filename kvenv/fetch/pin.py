"""``kvenv pin``'s facts: a native wheel's identity (name, version, sha256, size) and its
``[native.source]``, from what the user names, with the wheel's bytes read and hashed.

A source is one of:

- a wheel file inside the project (``kind = "path"``, relative to the project);
- an https URL (``kind = "url"``), downloaded under kvenv's https policy (:mod:`.http`);
- ``hf://ORG/REPO@REVISION/FILE`` (``kind = "hf"``): the revision (a branch, a tag or a
  commit) resolved to its 40-hex commit by the real ``huggingface_hub`` client, then the file
  downloaded at that commit; only the commit is recorded;
- ``NAME==VERSION`` (``kind = "index"``): the wheels of that version for the profile's target
  (:class:`kvenv.lock.finder.Finder`, the lock's own choice of target wheels); several are
  listed, never guessed (``filename`` picks one).

The wheel's METADATA must name the same distribution and version as its file name. Nothing
here writes the profile (:mod:`kvenv.model.profileedit` does).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from kvenv._util.hashing import HashingWriter, sha256_file
from kvenv._util.redact import redact_url
from kvenv.errors import FetchError, InputError, IntegrityError, UsageError

__all__ = ["PinnedWheel", "pin_file", "pin_hf", "pin_index", "pin_url", "source_kind"]

_HF = re.compile(r"hf://(?P<repo>[^/@\s]+/[^/@\s]+)@(?P<revision>[^/\s]+)/(?P<file>\S+\.whl)")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_NAME_VERSION = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>\S+)")


@attrs.frozen
class PinnedWheel:
    """What ``[native]`` and ``[native.source]`` record of one wheel (``source``: the table's
    keys, ``kind`` first); ``notes``: what the pin did that the user should know (a branch
    resolved to a commit)."""

    name: str
    version: str
    sha256: str
    size: int
    filename: str
    source: dict[str, str]
    notes: tuple[str, ...] = ()


def source_kind(text: str) -> str:
    """Which kind of source ``text`` names: ``hf``, ``url``, ``index`` or ``path``."""
    if text.startswith("hf://"):
        return "hf"
    if "://" in text:
        return "url"
    if _NAME_VERSION.fullmatch(text.strip()) and not text.endswith(".whl"):
        return "index"
    return "path"


def _identity(filename: str, what: str) -> tuple[str, str]:
    """The (name, version) a wheel's file name gives, as written."""
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        raise InputError(
            f"{what}: {filename!r} is not a wheel file name",
            hint="pin a .whl file (name-version-python-abi-platform.whl)",
        ) from None
    return str(name), str(version)


def _checked(path: Path, filename: str, what: str) -> tuple[str, str]:
    """The wheel at ``path``: its METADATA name and version, which must be its file name's."""
    from kvenv.lock.metadata import read_wheel_metadata

    name, version = _identity(filename, what)
    meta = read_wheel_metadata(path)
    if canonicalize_name(meta.name) != canonicalize_name(name) or meta.version != Version(version):
        raise IntegrityError(
            f"{what}: the file is named for {name} {version} but its METADATA says "
            f"{meta.name} {meta.version}",
            hint="pin a wheel whose METADATA matches its file name",
        )
    return meta.name, str(meta.version)


def pin_file(path: Path, project: Path) -> PinnedWheel:
    """A wheel file inside ``project`` (``kind = "path"``, recorded relative to it)."""
    absolute = Path(path).absolute()
    if not absolute.is_file():
        raise InputError(f"no wheel file at {path}", hint="give an existing .whl file")
    base = project.absolute()
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        raise InputError(
            f"{path} is outside the profile's project {base}",
            hint=f"copy the wheel into the project (e.g. {base / 'wheels'}) and pin that copy, "
            "or pin it by an https URL, hf:// or NAME==VERSION",
        ) from None
    name, version = _checked(absolute, absolute.name, str(path))
    sha256, size = sha256_file(absolute)
    source = {"kind": "path", "path": relative.as_posix()}
    return PinnedWheel(name, version, sha256, size, absolute.name, source)


def _download(url: str, into: Path, what: str) -> tuple[str, int]:
    """``url`` streamed into the file ``into`` (https policy), its sha256 and size."""
    from kvenv.fetch import http

    with into.open("wb") as handle, HashingWriter(handle, label=what) as sink:
        http.download(url, sink)
    return sink.hexdigest(), sink.size


def pin_url(url: str) -> PinnedWheel:
    """A wheel at an https URL (``kind = "url"``), downloaded and hashed."""
    from kvenv._util.urls import check_url
    from kvenv.plan.artifacts import url_filename

    check_url(url, what="the wheel URL")
    filename = url_filename(url)
    shown = redact_url(url)
    _identity(filename, shown)
    with tempfile.TemporaryDirectory(prefix="kvenv-pin-") as scratch:
        path = Path(scratch) / filename
        sha256, size = _download(url, path, shown)
        name, version = _checked(path, filename, shown)
    return PinnedWheel(name, version, sha256, size, filename, {"kind": "url", "url": url})


def parse_hf(text: str) -> tuple[str, str, str]:
    """``hf://ORG/REPO@REVISION/FILE`` as (repo, revision, filename)."""
    found = _HF.fullmatch(text.strip())
    if found is None:
        raise UsageError(
            f"not a Hub wheel reference: {text!r}",
            hint="write hf://ORG/REPO@REVISION/FILE.whl (REVISION: a commit, branch or tag)",
        )
    return found["repo"], found["revision"], found["file"]


def resolve_revision(repo: str, revision: str, filename: str) -> str:
    """The 40-hex commit ``revision`` (a branch, tag or commit) names for ``filename`` in
    ``repo``, as the Hub says it (``X-Repo-Commit``), through ``huggingface_hub``."""
    from kvenv.fetch.hub import _explain, _quiet_hub, hub_endpoint, hub_offline

    if hub_offline():
        raise FetchError(
            f"cannot resolve {repo}@{revision}: HF_HUB_OFFLINE is set",
            hint="unset HF_HUB_OFFLINE to pin from the Hub",
        )
    import huggingface_hub

    endpoint = hub_endpoint()
    url = huggingface_hub.hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
    try:
        with _quiet_hub():
            meta = huggingface_hub.get_hf_file_metadata(url, endpoint=endpoint)
    except Exception as exc:
        raise FetchError(
            f"cannot resolve {repo}@{revision}/{filename} on the Hub: {_explain(exc)}",
            hint="check the repository, the revision (a commit, branch or tag) and the file",
        ) from None
    commit = meta.commit_hash or ""
    if not _COMMIT.fullmatch(commit):
        raise FetchError(
            f"the Hub named no commit for {repo}@{revision} (got {commit!r})",
            hint="pin a 40-hex commit: hf://ORG/REPO@COMMIT/FILE",
        )
    return commit


def pin_hf(text: str) -> PinnedWheel:
    """A wheel on the Hub (``kind = "hf"``): the revision resolved to its commit, the file
    downloaded at that commit and hashed."""
    from kvenv.fetch.hub import download_hf
    from kvenv.model.fields import HfRepo, Revision, WheelFilename
    from kvenv.model.profile import HfSource

    repo, revision, filename = parse_hf(text)
    _identity(filename, text)
    commit = resolve_revision(repo, revision, filename)
    notes = () if revision == commit else (f"{revision} resolved to commit {commit}",)
    source = HfSource(HfRepo(repo), Revision(commit), WheelFilename(filename))
    with tempfile.TemporaryDirectory(prefix="kvenv-pin-") as scratch:
        path = download_hf(source, Path(scratch))
        sha256, size = sha256_file(path)
        name, version = _checked(path, filename, text)
    table = {"kind": "hf", "repo": repo, "revision": commit, "filename": filename}
    return PinnedWheel(name, version, sha256, size, filename, table, notes)


def parse_name_version(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` as (name, version)."""
    found = _NAME_VERSION.fullmatch(text.strip())
    if found is None:
        raise UsageError(f"not NAME==VERSION: {text!r}", hint="e.g. kvenv pin vllm==0.18.2")
    try:
        Version(found["version"])
    except InvalidVersion:
        raise UsageError(
            f"{found['version']!r} is not a version (PEP 440)", hint="e.g. kvenv pin vllm==0.18.2"
        ) from None
    return found["name"], found["version"]


def pin_index(
    text: str, finder: Any, *, filename: str | None = None, named: Sequence[str] = ()
) -> PinnedWheel:
    """``NAME==VERSION`` on the finder's indexes (``kind = "index"``): the one wheel of that
    version for the finder's target, or the one named ``filename``; several are listed (a
    :class:`UsageError` saying how to choose), none is an :class:`InputError` naming the
    versions seen. The sha256 and size are the index's when it publishes both, else the
    wheel's bytes'. The wheel's index is recorded as ``index_url`` when it is one of
    ``named`` (the indexes the user named) and https; the default index never is."""
    name, version = parse_name_version(text)
    project = finder.project(name)
    wanted = Version(version)
    wheels = sorted(
        (w for w in project.wheels if w.version == wanted), key=lambda w: (w.rank, w.filename)
    )
    if filename is not None:
        wheels = [w for w in wheels if w.filename == filename]
        if not wheels:
            raise InputError(
                f"no wheel {filename} of {name} {version} for the profile's target",
                hint="drop --file to list the target's wheels of that version",
            )
    if not wheels:
        seen = ", ".join(project.seen_versions[:10]) or "none"
        raise InputError(
            f"no wheel of {name} {version} for the profile's target on the index",
            hint=f"versions seen (any platform): {seen}; check the name, the version and "
            "--index-url/--find-links",
        )
    if len(wheels) > 1:
        listed = "\n".join(f"  {w.filename}" for w in wheels)
        raise UsageError(
            f"{len(wheels)} wheels of {name} {version} fit the profile's target:\n{listed}",
            hint=f"choose one: kvenv pin {name}=={version} --file {wheels[0].filename}",
        )
    wheel = wheels[0]
    sha256, size = wheel.sha256, wheel.size
    if sha256 is None or size is None:
        sha256, size = _wheel_bytes(wheel)
    source = {"kind": "index", "filename": wheel.filename}
    explicit = {url.rstrip("/") for url in named}
    if wheel.index and wheel.index.startswith("https://") and wheel.index.rstrip("/") in explicit:
        source["index_url"] = wheel.index
    return PinnedWheel(str(project.name), version, sha256, size, wheel.filename, source)


def _wheel_bytes(wheel: Any) -> tuple[str, int]:
    """The sha256 and size of an index wheel whose page does not publish both: its bytes."""
    local = wheel.local_path
    if local is not None:
        return sha256_file(local)
    with tempfile.TemporaryDirectory(prefix="kvenv-pin-") as scratch:
        sha256, size = _download(wheel.url, Path(scratch) / wheel.filename, wheel.filename)
    if wheel.sha256 is not None and wheel.sha256 != sha256:
        raise IntegrityError(
            f"{wheel.filename}: the index publishes sha256 {wheel.sha256}, its bytes hash to "
            f"{sha256}",
            hint="the index serves a file other than the one it lists; nothing was pinned",
        )
    return sha256, size
