"""The native wheel's own requirements (its METADATA Requires-Dist), from wherever they can be
had, in this order: a ``--native-requires FILE``; the wheel's source when reachable (a path
source is read in place and its sha256 checked; an index source through the finder; hf and url
sources by HTTP range requests); else the ``requires`` recorded in the existing lock for the
same native identity. Metadata read from a remote source is cached by the wheel's sha256, and
that cache serves first (so ``--offline --fresh`` works with a warm cache). They are
recorded in the new lock so later checks run offline."""

from __future__ import annotations

from pathlib import Path

import attrs
from packaging.utils import canonicalize_name
from packaging.version import Version

from kvenv._util import memo
from kvenv._util.hashing import sha256_file
from kvenv._util.redact import redact_url
from kvenv.errors import FetchError, IntegrityError, KvenvError, Problem, ProfileError
from kvenv.lock.cache import IndexCache
from kvenv.lock.finder import Finder
from kvenv.lock.metadata import (
    MetadataFetcher,
    parse_metadata,
    range_metadata,
    read_wheel_metadata,
)
from kvenv.lock.pylock import LinkedObject, LockFile, NativeEntry
from kvenv.lock.reqfile import read_requirements
from kvenv.model.loading import LoadedProfile
from kvenv.model.profile import HfSource, IndexSource, Native, PathSource, UrlSource

# How requirements read from each kind of source are recorded (``requires-from``); the same
# whether they came over the network or from the metadata cache, so the lock is the same.
_LABELS = {"index": "index metadata", "url": "url", "hf": "hf"}


@attrs.frozen
class NativeRequires:
    requires: tuple[str, ...]
    source: str  # how they were obtained, recorded as requires-from
    # what its shared objects link (kvenv.lock.linkage), recorded as [[...native.linkage]]
    linkage: tuple[LinkedObject, ...] | None = None
    overlay_provides: tuple[str, ...] = ()  # which of its libraries the overlay ships


def previous_native(native: Native, previous: LockFile | None) -> NativeEntry | None:
    """What the previous lock recorded of ``native``, when it recorded the same wheel (name,
    version, sha256); else None."""
    if previous is None:
        return None
    entry = previous.kvenv.native
    same = (entry.name, entry.version, entry.sha256) == (native.name, native.version, native.sha256)
    return entry if same else None


_PIN_FIX = (
    "pin the wheel with `kvenv pin SOURCE --profile {profile}` (SOURCE: a .whl file, an https "
    "URL, hf://ORG/REPO@REVISION/FILE or NAME==VERSION): it writes name, version, sha256, size "
    "and source"
)


def is_placeholder(sha256: str) -> bool:
    """Whether ``sha256`` is a stand-in (``"0" * 64``, ``"ab" * 32``, ...) rather than a
    digest: fewer than four distinct hex digits, which no real sha256 has in practice."""
    return len(set(sha256.lower())) < 4


def _pin_source(native: Native) -> str:
    """The ``kvenv pin`` SOURCE that pins the wheel ``native`` names, as its source says."""
    source = native.source
    if isinstance(source, HfSource):
        return f"hf://{source.repo}@{source.revision}/{source.filename}"
    if isinstance(source, UrlSource):
        return source.url
    if isinstance(source, PathSource):
        return source.path
    return f"{native.name}=={native.version}"


def native_requires(
    loaded: LoadedProfile,
    *,
    requires_file: Path | None,
    previous: LockFile | None,
    finder: Finder | None,
    offline: bool,
) -> NativeRequires:
    native = loaded.profile.native
    if native is None:
        raise KvenvError(
            f"profile {loaded.profile.name} has no [native] wheel to lock for",
            hint="add a [native] table to the profile",
        )
    if is_placeholder(native.sha256):
        raise ProfileError(
            f"the native wheel {native.name} {native.version} is not pinned yet: its sha256 is "
            "a placeholder",
            problems=[
                Problem(
                    f"sha256 {native.sha256[:12]}... is a placeholder, not a wheel's digest",
                    file=str(loaded.path),
                    path="$.native.sha256",
                    fix=_PIN_FIX.format(profile=loaded.profile.name),
                )
            ],
            hint=f"kvenv pin {_pin_source(native)} --profile {loaded.profile.name}",
        )
    if requires_file is not None:
        lines = tuple(str(r) for r in read_requirements(requires_file))
        return NativeRequires(lines, f"file {requires_file.name}")
    failure: KvenvError | None = None
    try:
        return _from_source(loaded, native, finder, offline)
    except (FetchError, IntegrityError) as exc:
        if isinstance(exc, IntegrityError):
            raise
        failure = exc
    entry = previous_native(native, previous)
    if entry is not None:
        return NativeRequires(tuple(entry.requires), entry.requires_from)
    raise FetchError(
        f"cannot read the requirements of the native wheel {native.name} {native.version}: "
        f"{failure.message if failure else 'source unreachable'}",
        hint="give them with --native-requires FILE (a requirements file of its Requires-Dist)",
    )


def _from_source(
    loaded: LoadedProfile, native: Native, finder: Finder | None, offline: bool
) -> NativeRequires:
    source = native.source
    if isinstance(source, PathSource):
        path = loaded.resolve(source.path)
        memo.note("stat", str(path))  # a kept offline lock holds while it is as it was
        if not path.is_file():
            raise FetchError(f"native wheel not found: {path}")
        digest, _size = sha256_file(path)
        if digest != native.sha256:
            raise IntegrityError(
                f"native wheel {path} has sha256 {digest}, the profile pins {native.sha256}",
                hint="pin the file as it is now: `kvenv pin "
                + f"{source.path} --profile {loaded.profile.name}`, or replace the file",
            )
        meta = read_wheel_metadata(path)
        return NativeRequires(meta.requires, "wheel")
    cache = finder.cache if finder is not None else None
    key = IndexCache.metadata_key(native.sha256, "")
    cached = cache.get_metadata(key) if cache is not None else None
    if cached is not None:
        meta = parse_metadata(cached, origin=f"the cached metadata of {native.name}")
        if (canonicalize_name(meta.name), meta.version) == (
            canonicalize_name(native.name),
            Version(native.version),
        ):
            return NativeRequires(meta.requires, _LABELS.get(source.kind, source.kind))
    if offline and not isinstance(source, IndexSource):  # the finder knows its own cache
        raise FetchError(
            f"offline, and no cached metadata of the native wheel (sha256 {native.sha256})"
        )
    if isinstance(source, IndexSource):
        if finder is None:
            raise FetchError("no finder")
        for wheel in finder.project(native.name).wheels:
            if wheel.sha256 == native.sha256 or (
                source.filename is not None and wheel.filename == source.filename
            ):
                fetcher = MetadataFetcher(finder.cache, lambda: finder.session, offline=offline)
                return NativeRequires(fetcher.get(wheel).requires, _LABELS["index"])
        raise FetchError(f"the index has no wheel of {native.name} with sha256 {native.sha256}")
    url: str
    if isinstance(source, UrlSource):
        url, how = source.url, _LABELS["url"]
    elif isinstance(source, HfSource):
        url, how = hf_url(source), _LABELS["hf"]
    else:
        raise FetchError("unknown native source")
    data = _remote_metadata(url, native.name)
    requires = parse_metadata(data, origin=redact_url(url)).requires
    if cache is not None:
        cache.put_metadata(key, data)
    return NativeRequires(requires, how)


def _remote_metadata(url: str, name: str) -> bytes:
    import httpx2

    with httpx2.Client(timeout=15.0, follow_redirects=True) as client:
        return range_metadata(client, url, name, origin=f"the native wheel {name}")


def hf_url(source: HfSource) -> str:
    """The Hub's resolve URL of an ``hf`` source (``huggingface_hub``'s), at ``HF_ENDPOINT``
    as it is now (the client reads it only once, at import, as :mod:`kvenv.fetch.hub` says)."""
    import os

    from huggingface_hub import hf_hub_url

    endpoint = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or None
    url: str = hf_hub_url(
        source.repo,
        source.filename,
        revision=source.revision,
        repo_type=source.repo_type,
        endpoint=endpoint,
    )
    return url
