"""``kvenv apply``: execute a plan into a new generation and switch to it atomically.

Layout of a runtime root (every name here is kvenv's; nothing else in the root is touched)::

    <root>/.kvenv-root                    ownership marker (a root without it is not kvenv's)
    <root>/.kvenv.lock                    file lock serialising applies (+ .kvenv.lock.owner)
    <root>/current.json                   {"generation": ID, "previous": ID}: THE switch
    <root>/activate.sh|.fish|.ps1         activation scripts of the current generation
    <root>/generations/<ID>/native/       the native wheel (hard links from the store)
    <root>/generations/<ID>/overlay/      the overlay wheels
    <root>/generations/<ID>/bin/          console scripts, shebang = the host interpreter
    <root>/generations/<ID>/manifest.json written last: a generation without it is incomplete

Why a ``current.json`` pointer replaced with ``os.replace`` and not a ``current`` symlink:
``os.replace`` of a file is atomic on every OS and filesystem kvenv meets (Kaggle datasets and
some mounts do not keep symlinks, Windows needs privileges for them), ``reset`` refuses to
follow symlinks anywhere under the root, and activation resolves the pointer to the
generation's real directories, so a process that activated a generation keeps importing from
it while a later apply switches (that previous generation is kept until the next apply).

Order: lock the root, clean up what a killed run left (generations without a manifest), plan,
fetch and verify every artifact (nothing is installed unless all are good), unpack new wheels
into the store, link the native and overlay layers into a fresh generation, write its
manifest, switch the pointer (the one moment the state changes), write the activation
scripts, then remove generations older than the previous one. A kill at any moment leaves the
previous generation current and intact; the next run finishes the job.
"""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import attrs

from kvenv import __version__
from kvenv.env.manifest import (
    MANIFEST_NAME,
    POINTER_NAME,
    GenerationDirs,
    HostPackage,
    InstalledDistribution,
    Manifest,
    NativeIdentity,
    Pointer,
    ProfileRef,
    generation_dir,
    read_manifest,
    read_pointer,
    write_json_atomic,
    write_manifest,
)
from kvenv.errors import ConflictError, InputError, Problem
from kvenv.model.fields import Sha256
from kvenv.model.loading import LoadedProfile
from kvenv.model.locations import ROOT_MARKER, Locations
from kvenv.model.profile import HfSource, PathSource, UrlSource
from kvenv.model.snapshot import HostSnapshot
from kvenv.plan.make import LockInput, Plan, effective_profile, make_plan, with_presence

KILL_ENV = "KVENV_TEST_KILL_AT"
SHIMS = {"sh": "bash", "fish": "fish", "ps1": "pwsh"}
OWNER_SUFFIX = ".owner"

Progress = Callable[[str, int, int | None], None]
Status = Literal["applied", "up-to-date", "dry-run"]


@attrs.frozen
class ApplyResult:
    status: Status
    plan: Plan
    root: str
    generation: str | None
    manifest: str | None
    removed: list[str] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)  # waived RECORD lies, file conflicts


def _test_kill(point: str) -> None:
    """Fault injection for tests: SIGKILL this process at ``point`` when ``$KVENV_TEST_KILL_AT``
    names it. Inert unless that variable is set."""
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


# -- ownership ---------------------------------------------------------------------------------

_OWN_NAMES = {ROOT_MARKER, ".kvenv.lock", ".kvenv.lock" + OWNER_SUFFIX}


def is_owned(root: Path) -> bool:
    return (root / ROOT_MARKER).is_file()


def claim_root(root: Path) -> None:
    """Make ``root`` a kvenv runtime root: create it, or adopt it when empty. A non-empty
    directory without the marker is someone else's and is refused."""
    if root.is_symlink() and not root.exists():
        raise ConflictError(f"runtime root is a dangling symlink: {root}")
    if root.exists() and not root.is_dir():
        raise ConflictError(
            f"runtime root is not a directory: {root}", hint="choose another --root"
        )
    if is_owned(root):
        return
    if root.exists():
        foreign = sorted(p.name for p in root.iterdir() if p.name not in _OWN_NAMES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise ConflictError(
                f"refusing to use non-empty directory {root}: it was not created by kvenv "
                f"(contains {shown})",
                hint="choose an empty or new --root; kvenv never overwrites directories it "
                "does not own",
            )
    root.mkdir(parents=True, exist_ok=True)
    data = {"kvenv": __version__, "created_at": _now()}
    write_json_atomic(root / ROOT_MARKER, data)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# -- the lock ----------------------------------------------------------------------------------


class RootLock:
    """``filelock`` on ``<root>/.kvenv.lock``; the holder's pid and host in a sidecar file."""

    def __init__(self, locations: Locations, *, wait: bool, on_wait: Callable[[str], None]):
        self.path = locations.lock
        self.owner = self.path.with_name(self.path.name + OWNER_SUFFIX)
        self.wait = wait
        self.on_wait = on_wait
        self._lock: object | None = None

    def holder(self) -> str:
        try:
            return self.owner.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def __enter__(self) -> RootLock:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if not self.wait:
                raise ConflictError(
                    f"another kvenv apply holds {self.path} ({self.holder()})",
                    hint="wait for it to finish, or run without --no-wait to queue",
                ) from None
            self.on_wait(f"waiting for another kvenv apply on this root ({self.holder()})")
            lock.acquire()
        self._lock = lock
        self.owner.write_text(f"pid {os.getpid()} on {socket.gethostname()}\n", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        from filelock import FileLock

        lock = self._lock
        if isinstance(lock, FileLock):
            self.owner.unlink(missing_ok=True)
            lock.release()


# -- generations -------------------------------------------------------------------------------


def new_generation_id() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def _is_generation_id(name: str) -> bool:
    stamp, _, tail = name.partition("-")
    return len(stamp) == 15 and stamp[8] == "T" and len(tail) == 6 and tail.isalnum()


def list_generations(locations: Locations) -> list[str]:
    base = locations.generations
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and _is_generation_id(p.name))


def remove_generations(locations: Locations, keep: set[str], *, incomplete_only: bool) -> list[str]:
    """Remove kvenv's generation directories not in ``keep`` (only those without a manifest
    when ``incomplete_only``). Never follows symlinks."""
    removed: list[str] = []
    for name in list_generations(locations):
        if name in keep:
            continue
        path = generation_dir(locations.root, name)
        if path.is_symlink():
            continue
        if incomplete_only and (path / MANIFEST_NAME).exists():
            continue
        shutil.rmtree(path)
        removed.append(name)
    return removed


# -- the manifest ------------------------------------------------------------------------------


def native_source_text(loaded: LoadedProfile) -> str:
    native = loaded.profile.native
    if native is None:
        return ""
    source = native.source
    if isinstance(source, HfSource):
        return f"hf:{source.repo}@{source.revision}/{source.filename}"
    if isinstance(source, UrlSource):
        return f"url:{source.url}"
    if isinstance(source, PathSource):
        return f"path:{source.path}"
    return f"index:{source.filename or f'{native.name}=={native.version}'}"


def _host_protected(loaded: LoadedProfile, host: HostSnapshot) -> list[HostPackage]:
    out: list[HostPackage] = []
    for name in loaded.profile.host.protected:
        found = host.find(name)
        out.append(
            HostPackage(
                name=name,
                version=found.version if found else None,
                location=found.location if found else None,
            )
        )
    return out


# -- apply -------------------------------------------------------------------------------------


def current_state(locations: Locations) -> tuple[Pointer | None, Manifest | None]:
    pointer = read_pointer(locations.root)
    if pointer is None:
        return None, None
    path = generation_dir(locations.root, pointer.generation) / MANIFEST_NAME
    return pointer, read_manifest(path, root=locations.root)


def _stored(locations: Locations, shas: list[str]) -> frozenset[str]:
    from kvenv.env.store import lookup

    return frozenset(s for s in shas if lookup(locations.store, s) is not None)


def _cached(locations: Locations, shas: list[str]) -> frozenset[str]:
    from kvenv.fetch.cache import ArtifactCache

    cache = ArtifactCache(locations.cache)
    return frozenset(s for s in shas if cache.entry(s).is_dir())


def plan_apply(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    locations: Locations,
    *,
    strict: bool = False,
    recorded: HostSnapshot | None = None,
) -> Plan:
    """The plan against the root's current state and what the cache and store hold."""
    current = None
    if is_owned(locations.root):
        _, current = current_state(locations)
    draft = make_plan(loaded, lock, host, current, strict=strict, recorded=recorded)
    shas = [a.sha256 for a in draft.artifacts]
    return with_presence(draft, _cached(locations, shas), _stored(locations, shas))


def _file_digest(path: Path) -> str | None:
    """``sha256:`` of a file's bytes (what :func:`kvenv.plan.make.lock_digest_of` records), or None
    when it cannot be read."""
    import hashlib

    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _shims_current(locations: Locations, manifest: Manifest) -> bool:
    from kvenv.env.activation import render

    manifest_path = str(generation_dir(locations.root, manifest.generation) / MANIFEST_NAME)
    for suffix, shell in SHIMS.items():
        text = f"# kvenv activation for generation {manifest.generation}; generated, do not edit\n"
        text += render(manifest.activation, shell, manifest_path=manifest_path)
        try:
            if (locations.root / f"activate.{suffix}").read_text(encoding="utf-8") != text:
                return False
        except (OSError, UnicodeDecodeError):
            return False
    return True


def noop_fast(
    loaded: LoadedProfile,
    locations: Locations,
    host: Callable[[], HostSnapshot],
    recorded: Callable[[], HostSnapshot | None],
) -> tuple[str, str] | None:
    """``(generation, manifest path)`` when applying ``loaded`` is certainly a no-op, judged
    without reading the lock or the store; None when unsure (then plan and apply in full).

    A no-op needs: no apply in progress; a current manifest that validates, was written by
    this kvenv and records this profile's digest, the sha256 of the lock file's bytes and the
    profile's native wheel; its generation's dirs present; no other generation to clean up; the
    activation scripts as an apply would write them; and a live host that still passes the
    profile's target checks. The lock's own checks and the native wheel's tags are functions
    of the profile and the lock bytes, which passed them when the manifest was written. A
    profile without ``[target]`` (its target is the host) always takes the full path.
    """
    from kvenv.probe.checks import check_host

    profile = loaded.profile
    root = locations.root
    owner = locations.lock.with_name(locations.lock.name + OWNER_SUFFIX)
    if profile.target is None or not is_owned(root) or owner.exists():
        return None
    lock_path = loaded.lock_path
    lock_digest = None
    if lock_path.exists() or profile.overlay.lock is not None:
        lock_digest = _file_digest(lock_path)
        if lock_digest is None:
            return None
    try:
        pointer, manifest = current_state(locations)
    except InputError:
        return None
    if pointer is None or manifest is None or manifest.kvenv_version != __version__:
        return None
    native_sha = profile.native.sha256 if profile.native else None
    if not manifest.matches(loaded.digest, lock_digest, native_sha) or not _dirs_present(manifest):
        return None
    keep = {pointer.generation} | ({pointer.previous} if pointer.previous else set())
    if not set(list_generations(locations)) <= keep or not _shims_current(locations, manifest):
        return None
    findings = check_host(profile, host(), recorded=recorded())
    if any(f.status == "error" for f in findings):
        return None
    return manifest.generation, str(generation_dir(root, manifest.generation) / MANIFEST_NAME)


def _refuse_incompatible(plan: Plan) -> None:
    if plan.compatible:
        return
    if all(f.check.startswith("lock ") for f in plan.errors):
        raise ConflictError(
            f"the lock does not match profile {plan.profile}",
            problems=[Problem(f.message, fix=f.fix) for f in plan.errors],
            hint=f"nothing was changed; run `kvenv lock {plan.profile}` (see `kvenv plan`)",
        )
    raise ConflictError(
        f"profile {plan.profile} does not fit this host",
        problems=[Problem(f.message, fix=f.fix) for f in plan.errors],
        hint="nothing was changed; use a profile made for this host (see `kvenv plan`)",
    )


def apply(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    locations: Locations,
    *,
    strict: bool = False,
    offline: bool = False,
    bundle: Path | None = None,
    dry_run: bool = False,
    wait: bool = True,
    jobs: int = 8,
    python: str | None = None,
    recorded: HostSnapshot | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] = lambda _message: None,
) -> ApplyResult:
    """Apply ``loaded`` (with ``lock``) onto ``host`` under ``locations``."""
    root = locations.root
    # Plan (and refuse) before anything is written: a refused apply creates no root.
    plan = plan_apply(loaded, lock, host, locations, strict=strict, recorded=recorded)
    _refuse_incompatible(plan)
    if dry_run:
        return ApplyResult("dry-run", plan, str(root), plan.current_generation, None)
    claim_root(root)
    with RootLock(locations, wait=wait, on_wait=on_wait):
        pointer = read_pointer(root)
        keep = {pointer.generation} if pointer else set()
        if pointer and pointer.previous:
            keep.add(pointer.previous)
        cleaned = remove_generations(locations, keep, incomplete_only=True)
        # Plan again under the lock unless nothing can have changed: an up-to-date plan made
        # over the generation that is still current (generations are immutable, their ids
        # unique) stays right, so a no-op apply plans once.
        unchanged = pointer is not None and pointer.generation == plan.current_generation
        if not (plan.up_to_date and unchanged):
            plan = plan_apply(loaded, lock, host, locations, strict=strict, recorded=recorded)
            _refuse_incompatible(plan)
        if plan.up_to_date and pointer is not None:
            _, manifest = current_state(locations)
            if manifest is not None and _dirs_present(manifest):
                write_shims(locations, manifest)
                removed = remove_generations(locations, keep, incomplete_only=False)
                return ApplyResult(
                    "up-to-date",
                    plan,
                    str(root),
                    manifest.generation,
                    str(generation_dir(root, manifest.generation) / MANIFEST_NAME),
                    removed=cleaned + removed,
                )
        result = _build_and_switch(
            loaded,
            lock,
            host,
            locations,
            plan,
            pointer,
            offline=offline,
            bundle=bundle,
            jobs=jobs,
            python=python,
            progress=progress,
        )
        return attrs.evolve(result, removed=cleaned + result.removed)


def _dirs_present(manifest: Manifest) -> bool:
    dirs = manifest.dirs
    return all(os.path.isdir(d) for d in (dirs.native, dirs.overlay, dirs.bin))


def _fetch_progress(progress: Progress | None) -> Progress | None:
    kill_mid = os.environ.get(KILL_ENV) == "mid-fetch"
    if progress is None and not kill_mid:
        return None

    def report(label: str, done: int, total: int | None) -> None:
        if kill_mid and done > 0 and (total is None or done < total):
            _test_kill("mid-fetch")
        if progress is not None:
            progress(label, done, total)

    return report


def _build_and_switch(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    locations: Locations,
    plan: Plan,
    pointer: Pointer | None,
    *,
    offline: bool,
    bundle: Path | None,
    jobs: int,
    python: str | None,
    progress: Progress | None,
) -> ApplyResult:
    from kvenv.env.activation import build_activation
    from kvenv.env.store import GenerationLayout, link_layer, unpack_all
    from kvenv.fetch import fetch_all
    from kvenv.plan.artifacts import artifacts_for

    root = locations.root
    protected = list(loaded.profile.host.protected)
    artifacts = artifacts_for(effective_profile(loaded, host), lock.lockfile if lock else None)
    files = fetch_all(
        artifacts,
        cache=locations.cache,
        offline=offline,
        bundle=bundle,
        jobs=jobs,
        progress=_fetch_progress(progress),
    )
    _test_kill("fetch")
    missing = [a.label for a in artifacts if a.sha256 not in files]
    if missing:
        raise InputError(f"artifacts missing after fetch: {', '.join(missing)}")
    _test_kill("verify")
    wheels = {a.sha256: files[a.sha256] for a in artifacts}
    waivers = [w.name for w in loaded.profile.overlay.record_waivers]
    # A waived RECORD is accepted while unpacking; linking accepts it in the overlay only.
    entries = unpack_all(
        locations.store, wheels, protected=protected, record_waivers=waivers, jobs=jobs
    )
    generation = new_generation_id()
    gen = generation_dir(root, generation)
    interpreter = python or host.python.executable or sys.executable
    gen.mkdir(parents=True)
    native_layout = GenerationLayout.beside(gen / "native")
    overlay_layout = GenerationLayout.beside(gen / "overlay")
    for layout in (native_layout, overlay_layout):
        layout.site.mkdir()
    native_layout.bin.mkdir()  # shared by both layers
    natives = [entries[a.sha256] for a in artifacts if a.role == "native"]
    overlays = [entries[a.sha256] for a in artifacts if a.role == "overlay"]
    native_layer = link_layer(
        natives, native_layout, python=interpreter, protected=protected, layer="native", jobs=jobs
    )
    _test_kill("install-native")
    overlay_layer = link_layer(
        overlays,
        overlay_layout,
        python=interpreter,
        protected=protected,
        record_waivers=waivers,
        jobs=jobs,
    )
    native_dists, overlay_dists = native_layer.dists, overlay_layer.dists
    conflicts = native_layer.conflicts + overlay_layer.conflicts
    _test_kill("install-overlay")
    activation, notes = build_activation(
        generation=gen,
        overlay=overlay_layout.site,
        native=native_layout.site,
        bin_dir=native_layout.bin,
        host=host,
        env={str(k): v for k, v in loaded.profile.runtime.env.items()},
        protected=protected,
    )
    shas = [a.sha256 for a in artifacts if a.role == "native"] + [
        a.sha256 for a in artifacts if a.role == "overlay"
    ]
    installed = [
        InstalledDistribution(
            name=d.name,
            version=d.version,
            layer="native" if i < len(native_dists) else "overlay",
            dist_info=d.dist_info,
            record_digest=d.record_digest,
            wheel_sha256=Sha256(sha),
            top_level=list(d.top_level),
            scripts=list(d.scripts),
            record_waived=list(d.record_waived),
        )
        for i, (d, sha) in enumerate(zip(native_dists + overlay_dists, shas, strict=True))
    ]
    native = loaded.profile.native
    manifest = Manifest(
        schema=1,
        kvenv_version=__version__,
        created_at=_now(),
        root=str(root),
        dirs=GenerationDirs(
            generation=generation,
            native=str(native_layout.site),
            overlay=str(overlay_layout.site),
            bin=str(native_layout.bin),
        ),
        profile=ProfileRef(name=loaded.profile.name, digest=loaded.digest, path=str(loaded.path)),
        lock_digest=lock.digest if lock else None,
        native=NativeIdentity(
            name=native.name,
            version=native.version,
            sha256=native.sha256,
            source=native_source_text(loaded),
        )
        if native
        else None,
        distributions=installed,
        activation=activation,
        protected=list(loaded.profile.host.protected),
        host_protected=_host_protected(loaded, host),
        python=interpreter,
        notes=notes,
        conflicts=conflicts,
    )
    manifest_path = gen / MANIFEST_NAME
    write_manifest(manifest_path, manifest)
    _test_kill("write-manifest")
    previous = pointer.generation if pointer else None
    switch(locations, generation, previous)
    _test_kill("switch")
    write_shims(locations, manifest)
    _test_kill("write-shims")
    keep = {generation} | ({previous} if previous else set())
    removed = remove_generations(locations, keep, incomplete_only=False)
    return ApplyResult(
        "applied",
        plan,
        str(root),
        generation,
        str(manifest_path),
        removed,
        notes,
        apply_warnings(manifest),
    )


def apply_warnings(manifest: Manifest) -> list[str]:
    """One line per waived RECORD mismatch and per resolved file conflict of ``manifest``."""
    out: list[str] = []
    for dist in manifest.distributions:
        for lie in dist.record_waived:
            out.append(
                f"{dist.name} {dist.version}: {lie.file} does not match its RECORD "
                f"(RECORD {lie.expected}, file {lie.actual}); accepted by the profile's "
                "record waiver, verified against the actual digest"
            )
    for conflict in manifest.conflicts:
        out.append(
            f"{conflict.winner} and {conflict.loser} both provide {conflict.file} with "
            f"different contents; kept {conflict.winner}'s (first in name order), "
            f"{conflict.loser}'s is shadowed"
        )
    return out


def switch(locations: Locations, generation: str, previous: str | None) -> None:
    """The one atomic state change: replace ``current.json``."""
    data = {"schema": 1, "generation": generation, "previous": previous}
    write_json_atomic(locations.root / POINTER_NAME, data)


def write_shims(locations: Locations, manifest: Manifest) -> None:
    """``<root>/activate.{sh,fish,ps1}`` for the current generation (each replaced atomically;
    unchanged files are left alone)."""
    from kvenv.env.activation import render

    manifest_path = str(generation_dir(locations.root, manifest.generation) / MANIFEST_NAME)
    for suffix, shell in SHIMS.items():
        text = f"# kvenv activation for generation {manifest.generation}; generated, do not edit\n"
        text += render(manifest.activation, shell, manifest_path=manifest_path)
        path = locations.root / f"activate.{suffix}"
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
