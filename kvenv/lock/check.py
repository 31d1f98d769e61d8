"""``kvenv lock --check``: is the lock valid, complete and current? Offline and pure over
(profile, host snapshot, lock).

Checks: nothing protected in the lock, and no wheel at hand (by path, or in the artifact
cache) that ships a protected package's import name; a portable lock names no index (paths
only); every package is a wheel with sha256 and size whose file name matches it and installs on the
target; every requirement of the native wheel, of the extra roots and of each locked package
(markers evaluated for the target, extras honoured) is satisfied by host ∪ lock (a host
package of unknown version is accepted); the profile and host snapshot digests match the
ones recorded; the lock was not edited by hand since kvenv wrote it (its content digest,
:mod:`kvenv.lock.digest`); each wheel's sha256 is the one its index publishes where kvenv's
page cache has the page (:mod:`kvenv.lock.published`).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

import attrs
from packaging.markers import Marker
from packaging.pylock import Package, PackageWheel
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from kvenv._util import memo
from kvenv._util.redact import redact_url
from kvenv.errors import Problem
from kvenv.lock.candidates import name_key
from kvenv.lock.contents import (
    PROTECTED_FIX,
    WheelAtHand,
    protected_entries,
    protected_message,
    sized_file,
)
from kvenv.lock.digest import first_edit, recorded
from kvenv.lock.published import Published
from kvenv.lock.pylock import LockFile
from kvenv.model.loading import LoadedProfile
from kvenv.model.snapshot import HostSnapshot, snapshot_digest
from kvenv.model.target import TargetEnv

_SHA256 = re.compile(r"[0-9a-f]{64}")
_RELOCK = "relock with `kvenv lock`"


@attrs.frozen
class CheckReport:
    lock: str
    problems: tuple[Problem, ...] = ()
    stale: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and not self.stale

    def to_json(self) -> dict[str, object]:
        return {
            "lock": self.lock,
            "ok": self.ok,
            "stale": list(self.stale),
            "skipped": list(self.skipped),
            "problems": [p.to_json() for p in self.problems],
        }


def check_lock(
    loaded: LoadedProfile,
    lock: LockFile,
    host: HostSnapshot | None,
    at_hand: WheelAtHand | None = None,
    published: Published | None = None,
) -> CheckReport:
    """Check ``lock``; ``at_hand`` finds wheels already on this machine (the artifact cache),
    whose file lists are checked for protected import names like wheels the lock names by
    path; ``published`` gives the sha256 an index publishes for a wheel where kvenv's page
    cache has its page (:mod:`kvenv.lock.published`)."""
    file = str(lock.path)
    problems: list[Problem] = []
    profile = loaded.profile

    def add(path: str, message: str, fix: str | None = None) -> None:
        problems.append(Problem(message, file=file, path=path, fix=fix))

    target = None
    skipped: tuple[str, ...] = ()
    if profile.target is not None:
        target = TargetEnv.from_profile_target(profile.target, file=str(loaded.path))
    else:
        skipped = (
            f"wheel tags, markers and the requirement closure: profile {profile.name} has no "
            "[target] to evaluate them for (add a [target] table to check them)",
        )
    protected = {name_key(n) for n in [*profile.host.protected, *lock.kvenv.protected]}
    protected_names = sorted({*profile.host.protected, *lock.kvenv.protected})
    waived = {name_key(w.name) for w in profile.host.waivers}

    locked: dict[str, Package] = {}
    for index, package in enumerate(lock.pylock.packages):
        where = f"$.packages[{index}]"
        if name_key(package.name) in protected:
            add(f"{where}.name", f"{package.name} is protected on the host", "remove it; relock")
        if package.name in locked:
            add(f"{where}.name", f"{package.name} is listed twice", "relock")
        problems.extend(_check_package(package, where, target, file))
        if published is not None:
            problems.extend(_check_published(package, where, published, file))
        problems.extend(_check_contents(lock, package, where, protected_names, at_hand))
        if lock.kvenv.portable:
            problems.extend(_check_portable(package, where, file))
        if target is not None and _applies(package, target):
            locked[package.name] = package

    problems.extend(_check_native(loaded, lock, file))
    problems[:0] = _check_edits(lock, profile.name, file)
    stale = _staleness(loaded, lock, host, target)
    if target is not None:
        declared = tuple(profile.overlay.requires)
        problems.extend(_closure(lock, locked, host, target, waived, file, declared))
    return CheckReport(file, tuple(problems), tuple(stale), skipped)


def _check_edits(lock: LockFile, profile: str, file: str) -> list[Problem]:
    """A lock edited by hand since kvenv wrote it (its recorded content digest no longer
    holds), named by the first difference (:mod:`kvenv.lock.digest`); a lock that records no
    digest (written before kvenv 0.2) cannot vouch for itself and is refused too."""
    fix = f"regenerate it with `kvenv lock {profile}` (the lock is derived: change the profile)"
    edit = first_edit(lock.data)
    if edit is not None:
        where, what = edit
        return [Problem(f"the lock was edited by hand: {what}", file=file, path=where, fix=fix)]
    if not recorded(lock.data):
        message = (
            "the lock records no content digest (written by a kvenv before 0.2): "
            "a hand edit cannot be told"
        )
        return [Problem(message, file=file, path="$.tool.kvenv", fix=fix)]
    return []


def _check_published(
    package: Package, where: str, published: Published, file: str
) -> Iterator[Problem]:
    """Each wheel's sha256 against the one its index publishes, where kvenv's page cache holds
    the project's page (offline: nothing is fetched)."""
    for w_index, wheel in enumerate(package.wheels or ()):
        sha = wheel.hashes.get("sha256")
        if not isinstance(sha, str) or not wheel.filename:
            continue
        for url, other in published(package.name, wheel.filename, package.index):
            if other != sha:
                yield Problem(
                    f"{wheel.filename}: the lock pins sha256 {sha}, the index publishes "
                    f"{other} ({redact_url(url)}, from kvenv's page cache)",
                    file=file,
                    path=f"{where}.wheels[{w_index}].hashes.sha256",
                    fix="relock with `kvenv lock` (an edited lock), or check the index",
                )


def _check_native(loaded: LoadedProfile, lock: LockFile, file: str) -> Iterator[Problem]:
    """The native wheel is recorded as one package marked ``native = true``, the profile's
    exactly: name, version, one wheel with its file name, sha256 and size; in a lock that names
    URLs, an ``hf`` native by the Hub's resolve URL at the pinned revision and a ``url`` native
    by its URL (a portable lock names it by path, as ``_check_portable`` checks)."""
    from kvenv.lock.pylock import hub_resolve_url
    from kvenv.model.profile import HfSource, PathSource, UrlSource

    def relock(message: str, path: str) -> Problem:
        return Problem(message, file=file, path=path, fix=_RELOCK)

    pin = loaded.profile.native
    marked = [i for i, t in enumerate(lock.package_tools) if t is not None and t.native]
    if pin is None:
        for index in marked:
            yield relock(
                "the lock records a native wheel; the profile has none",
                f"$.packages[{index}].tool.kvenv.native",
            )
        return
    if not marked:
        yield relock(
            f"the lock does not record the native wheel {pin.name} {pin.version} as a package "
            "(other installers would install the overlay without it)",
            "$.packages",
        )
        return
    for index in marked[1:]:
        yield relock(
            "a second package is marked as the native wheel",
            f"$.packages[{index}].tool.kvenv.native",
        )
    index = marked[0]
    package = lock.pylock.packages[index]
    where = f"$.packages[{index}]"
    if name_key(package.name) != name_key(pin.name):
        yield relock(
            f"the native package is {package.name}; the profile pins {pin.name}", f"{where}.name"
        )
    if package.version is None or package.version != Version(pin.version):
        yield relock(
            f"the native package's version is {package.version}; the profile pins {pin.version}",
            f"{where}.version",
        )
    wheels = list(package.wheels or ())
    if len(wheels) != 1:
        yield relock("the native package must have exactly one wheel", f"{where}.wheels")
        return
    wheel, at = wheels[0], f"{where}.wheels[0]"
    if wheel.hashes.get("sha256") != pin.sha256:
        yield relock(
            f"the native wheel's sha256 is {wheel.hashes.get('sha256')}; the profile pins "
            f"{pin.sha256}",
            f"{at}.hashes.sha256",
        )
    size: int | None = pin.size
    if size is None and isinstance(pin.source, PathSource):
        local = loaded.resolve(pin.source.path)
        memo.note("stat", str(local))  # a passed check holds while it is as it was
        size = local.stat().st_size if local.is_file() else None
    if size is not None and wheel.size != size:
        yield relock(
            f"the native wheel's size is {wheel.size}; the profile's wheel has {size} bytes",
            f"{at}.size",
        )
    source = pin.source
    expected = getattr(source, "filename", None)
    if expected and wheel.filename != expected:
        yield relock(
            f"the native wheel's file name is {wheel.filename}; the profile names {expected}",
            f"{at}.name",
        )
    if lock.kvenv.portable:
        return
    url = None
    if isinstance(source, HfSource):
        url = hub_resolve_url(source)
    elif isinstance(source, UrlSource):
        url = source.url
    if url is not None and wheel.url != url:
        yield relock(
            f"the native wheel's url is {wheel.url}; a lock that names URLs gives {url}",
            f"{at}.url",
        )


def _applies(package: Package, target: TargetEnv) -> bool:
    return target.evaluate(package.marker) if package.marker is not None else True


def _check_package(
    package: Package, where: str, target: TargetEnv | None, file: str
) -> list[Problem]:
    """The package's own fields; with a ``target``, also its marker and wheel tags."""
    out: list[Problem] = []

    def add(path: str, message: str, fix: str | None = None) -> None:
        out.append(Problem(message, file=file, path=path, fix=fix))

    if package.version is None:
        add(f"{where}.version", f"{package.name} has no version", "relock")
    if not package.wheels:
        add(f"{where}.wheels", f"{package.name} has no wheel (kvenv locks wheels only)", "relock")
        return out
    if target is not None and package.marker is not None and not _applies(package, target):
        add(
            f"{where}.marker",
            f"{package.name} is not installed on the target: its marker {package.marker} is false",
            "relock",
        )
    fits = False
    for w_index, wheel in enumerate(package.wheels):
        path = f"{where}.wheels[{w_index}]"
        out.extend(_check_wheel(wheel, path, file))
        if target is None or target.supports_wheel(wheel.filename):
            fits = True
    if target is not None and not fits:
        add(f"{where}.wheels", f"no wheel of {package.name} installs on {target.describe()}")
    return out


def _wheel_places(lock: LockFile, wheel: PackageWheel, at_hand: WheelAtHand | None) -> list[Path]:
    """Where the wheel's file may be on this machine, in the order they are tried: by the
    lock's path, by a ``file:`` URL, in the artifact cache."""
    sha = wheel.hashes.get("sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        return []
    candidates: list[Path] = []
    if wheel.path is not None:
        candidates.append(lock.path.parent / wheel.path)
    if wheel.url is not None and wheel.url.startswith("file:"):
        candidates.append(Path(unquote(urlparse(wheel.url).path)))
    if at_hand is not None and wheel.filename:
        cached = at_hand(sha, wheel.filename, wheel.size)
        if cached is not None:
            candidates.append(cached)
    return candidates


def _wheel_file(lock: LockFile, wheel: PackageWheel, at_hand: WheelAtHand | None) -> Path | None:
    """The wheel's file on this machine (of the size the lock gives), or None. Each place
    looked at is noted (:mod:`kvenv.lock.quick`: a passed check holds while it is as it was)."""
    for candidate in _wheel_places(lock, wheel, at_hand):
        memo.note("stat", str(candidate))
        found = sized_file(candidate, wheel.size)
        if found is not None:
            return found
    return None


def _check_contents(
    lock: LockFile,
    package: Package,
    where: str,
    protected: list[str],
    at_hand: WheelAtHand | None,
) -> Iterator[Problem]:
    """A wheel at hand that ships a protected package's import name."""
    if not protected:
        return
    for w_index, wheel in enumerate(package.wheels or ()):
        path = _wheel_file(lock, wheel, at_hand)
        entries = protected_entries(path, protected) if path is not None else ()
        if entries:
            yield Problem(
                protected_message(wheel.filename, entries),
                file=str(lock.path),
                path=f"{where}.wheels[{w_index}]",
                fix=PROTECTED_FIX,
            )


def _check_wheel(wheel: PackageWheel, path: str, file: str) -> Iterator[Problem]:
    sha = wheel.hashes.get("sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        yield Problem(
            "the wheel has no sha256 hash", file=file, path=f"{path}.hashes", fix="relock"
        )
    if wheel.size is None:
        yield Problem("the wheel has no size", file=file, path=f"{path}.size", fix="relock")
    elif wheel.size <= 0:
        yield Problem("the wheel's size is not positive", file=file, path=f"{path}.size")


def _check_portable(package: Package, where: str, file: str) -> Iterator[Problem]:
    """A portable lock names no index: wheels by ``path`` only, no ``index`` key."""
    if package.index is not None:
        yield Problem(
            "a portable lock names no index", file=file, path=f"{where}.index", fix="relock"
        )
    for w_index, wheel in enumerate(package.wheels or ()):
        path = f"{where}.wheels[{w_index}]"
        if wheel.url is not None or wheel.path is None:
            yield Problem(
                "a portable lock gives each wheel a path and no url",
                file=file,
                path=f"{path}.url",
                fix="relock",
            )
        elif PurePosixPath(wheel.path).name != wheel.filename:
            yield Problem(
                f"the wheel's path does not end in its file name {wheel.filename}",
                file=file,
                path=f"{path}.path",
                fix="relock",
            )


def _closure(
    lock: LockFile,
    locked: dict[str, Package],
    host: HostSnapshot | None,
    target: TargetEnv,
    waived: set[str],
    file: str,
    declared: tuple[str, ...] = (),
) -> list[Problem]:
    out: list[Problem] = []
    tools = {p.name: t for p, t in zip(lock.pylock.packages, lock.package_tools, strict=True)}
    positions = {p.name: i for i, p in enumerate(lock.pylock.packages)}
    native = lock.kvenv.native
    native_key = name_key(native.name)
    queue: deque[tuple[str, frozenset[str], str]] = deque()
    # (requirement line, extras active on its owner, owner label)
    for line in native.requires:
        queue.append((line, frozenset(), f"{native.name} {native.version}"))
    for line in lock.kvenv.requires:
        queue.append((line, frozenset(), "the lock's extra requirements"))
    for line in declared:
        queue.append((line, frozenset(), "the profile's [overlay]"))
    expanded: set[tuple[str, frozenset[str]]] = set()
    while queue:
        line, extras, owner = queue.popleft()
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            out.append(Problem(f"{owner} has an invalid requirement {line!r}: {exc}", file=file))
            continue
        if req.marker is not None and not target.evaluate(Marker(str(req.marker)), extras):
            continue
        key = name_key(req.name)
        if key in waived or key == native_key:
            continue
        name = canonicalize_name(req.name)
        wanted = frozenset(canonicalize_name(e) for e in req.extras)
        package = locked.get(name)
        if package is not None:
            version = package.version
            where = f"$.packages[{positions[name]}]"
            if version is not None and not req.specifier.contains(version, prereleases=True):
                out.append(
                    Problem(
                        f"{owner} requires {req.name}{req.specifier}; the lock has {version}",
                        file=file,
                        path=f"{where}.version",
                        fix="relock",
                    )
                )
            if (name, wanted) not in expanded:
                expanded.add((name, wanted))
                tool = tools.get(name)
                if tool is None:
                    out.append(
                        Problem(
                            f"{name} has no recorded requirements",
                            file=file,
                            path=f"{where}.tool.kvenv.requires",
                            fix="relock",
                        )
                    )
                else:
                    queue.extend((dep, wanted, f"{name} {version}") for dep in tool.requires)
            continue
        dist = host.find(name) if host is not None else None
        if dist is not None:
            if dist.version is not None and not req.specifier.contains(
                Version(dist.version), prereleases=True
            ):
                out.append(
                    Problem(
                        f"{owner} requires {req.name}{req.specifier}; the host has {dist.version} "
                        "and the lock does not provide another",
                        file=file,
                        path="$.packages",
                        fix="relock",
                    )
                )
            continue
        out.append(
            Problem(
                f"{owner} requires {req}, which neither the host nor the lock provides",
                file=file,
                path="$.packages",
                fix="relock",
            )
        )
    return out


def _staleness(
    loaded: LoadedProfile, lock: LockFile, host: HostSnapshot | None, target: TargetEnv | None
) -> list[str]:
    table = lock.kvenv
    profile = loaded.profile
    out: list[str] = []
    if table.profile != profile.name:
        out.append(f"the lock is for profile {table.profile}, not {profile.name}")
    details = []
    native = profile.native
    if native is None:
        details.append("the profile has no [native] wheel")
    else:
        for field in ("name", "version", "sha256"):
            was, now = getattr(table.native, field), getattr(native, field)
            if was != now:
                details.append(f"native.{field} {was} -> {now}")
    protected = sorted({canonicalize_name(n) for n in profile.host.protected})
    if protected != sorted(table.protected):
        details.append(f"host.protected {table.protected} -> {protected}")
    recorded = {w.name: w.reason for w in table.waivers}
    current = {w.name: w.reason for w in profile.host.waivers}
    if recorded != current:
        details.append("host.waivers changed")
    envs = [str(m) for m in lock.pylock.environments or []]
    if target is not None and (
        envs != [str(Marker(target.environment_marker()))] or table.target != target.describe()
    ):
        details.append(f"target {table.target} -> {target.describe()}")
    if details or table.profile_digest != loaded.digest:
        what = "; ".join(details) if details else "other profile fields changed"
        if table.profile_digest == loaded.digest:  # the profile is the one the lock was made for
            out.append(f"the lock no longer says what its profile says ({what}): an edited lock")
        else:
            out.append(f"the profile changed since the lock was made ({what})")
    out.extend(host_staleness(lock, host))
    return out


def digest_staleness(loaded: LoadedProfile, lock: LockFile, host: HostSnapshot | None) -> list[str]:
    """Why the lock's recorded digests no longer match: the profile's digest, and the digest of
    the host snapshot it was resolved against (``host``: the profile's recorded snapshot)."""
    out: list[str] = []
    if lock.kvenv.profile_digest != loaded.digest:
        out.append(
            f"the profile changed since the lock was made ({lock.kvenv.profile_digest} -> "
            f"{loaded.digest})"
        )
    out.extend(host_staleness(lock, host))
    return out


def host_staleness(lock: LockFile, host: HostSnapshot | None) -> list[str]:
    recorded = lock.kvenv.host_snapshot_digest
    current_host = snapshot_digest(host) if host is not None else None
    if recorded == current_host:
        return []
    return [
        "the host snapshot changed since the lock was made "
        f"({recorded or 'none'} -> {current_host or 'none'})"
    ]
