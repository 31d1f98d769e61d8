"""``kvenv apply``: execute a :class:`~kvenv.plan.make.Plan` into a new generation of the runtime
root and switch to it atomically (the root's layout: :mod:`kvenv.env.root`).

:func:`plan_apply` plans against the root's current state and what the cache and store hold;
:func:`apply` takes that plan and one :class:`ApplyOptions` record and runs the plan's steps in
the plan's order (``fetch``, ``verify``, ``install-native``, ``install-overlay``,
``write-manifest``, ``switch``, ``write-shims``; a plan whose steps break
:data:`~kvenv.plan.make.STEP_REQUIRES` is refused before anything is written). Around them:
lock the root, clean up what a killed run left (generations without a manifest), plan again
only if another apply switched the root since planning, and afterwards remove generations
older than the previous one. Nothing is installed unless every artifact was fetched and
verified; the pointer switch is the one moment the state changes. A kill at any moment leaves
the previous generation current and intact; the next run finishes the job.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import attrs

from kvenv import __version__
from kvenv._util import memo
from kvenv._util.killpoint import KILL_ENV as KILL_ENV
from kvenv._util.killpoint import kill_point
from kvenv._util.progress import Progress
from kvenv.env.activation import shims_current, write_shims
from kvenv.env.generations import DEFAULT_KEEP, complete_generations, retained
from kvenv.env.manifest import (
    ExecutablePth,
    GenerationDirs,
    HostPackage,
    InstalledDistribution,
    Manifest,
    NativeIdentity,
    Pointer,
    ProfileRef,
    read_manifest,
    write_manifest,
)
from kvenv.env.root import (
    POINTER_NAME,
    RootLock,
    claim_root,
    current_state,
    dirs_present,
    foreign_owner,
    generation_dir,
    is_owned,
    list_generations,
    manifest_path,
    new_generation_id,
    now,
    owner_file,
    owner_of,
    read_owner,
    read_pointer,
    remove_generations,
    remove_stray_temps,
    take_ownership,
)
from kvenv.env.rootfiles import unclaim_root, write_pointer
from kvenv.errors import ConflictError, InputError, IntegrityError, Problem
from kvenv.lock.input import LockInput, file_digest, has_lock
from kvenv.model.fields import Sha256
from kvenv.model.loading import LoadedProfile
from kvenv.model.locations import Locations
from kvenv.model.profile import HfSource, PathSource, UrlSource
from kvenv.model.snapshot import HostSnapshot

if TYPE_CHECKING:  # the store and fetch are imported when a step needs them (start-up time)
    from kvenv.env.bytecode import Bytecode, Compiler
    from kvenv.env.store import GenerationLayout, LinkedLayer, StoreEntry, Unpacker
    from kvenv.fetch.bundle import BundleInfo
    from kvenv.plan.make import Plan, PlanArtifact, StepName


ApplyStatus = Literal["applied", "up-to-date", "dry-run"]


def _ignore(_message: str) -> None:
    return None


@attrs.frozen
class ApplyOptions:
    """How to execute a plan (what to execute is the plan's)."""

    offline: bool = False
    bundle: BundleInfo | None = None  # an opened bundle: artifacts come from it, offline
    dry_run: bool = False
    wait: bool = True  # queue behind another apply on the root (else refuse)
    jobs: int = 8
    python: str | None = None  # interpreter for console scripts (default: the host's)
    progress: Progress | None = None
    on_wait: Callable[[str], None] = _ignore
    # Re-verify everything the generation uses (cached wheels re-hashed, store entries checked
    # against their RECORD) and build a fresh generation even when the applied one matches.
    repair: bool = False
    # How many finished generations to keep (the new one and the one current before it always;
    # then the newest others): kvenv.env.generations.keep_count.
    keep: int = DEFAULT_KEEP
    # Compile each wheel's modules once per store entry with the host interpreter, so the
    # generation carries bytecode (kvenv.env.bytecode); ``apply --no-compile`` turns it off.
    compile: bool = True


@attrs.frozen
class ApplyResult:
    status: ApplyStatus
    plan: Plan
    root: str
    generation: str | None
    manifest: str | None
    removed: list[str] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)  # waived RECORD lies, file conflicts
    # The layers linked (a recall of the generation is made from them: kvenv.env.recall) and
    # whether a damaged cached wheel or store entry was replaced on the way.
    layers: tuple[LinkedLayer, ...] = attrs.field(default=(), eq=False, repr=False)
    repaired: bool = False


# -- planning against a root -------------------------------------------------------------------


def plan_apply(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    locations: Locations,
    *,
    strict: bool = False,
    recorded: HostSnapshot | None = None,
    repair: bool = False,
) -> Plan:
    """The plan against the root's current state and what the cache and store hold. With
    ``repair`` an unreadable current state counts as nothing applied (the repair rebuilds)."""
    from kvenv.env.pthreport import with_pth_findings
    from kvenv.plan.make import make_plan, with_presence

    current: Manifest | _ForOtherPython | None = None
    if is_owned(locations.root) and foreign_owner(locations.root, owner_of(loaded)) is None:
        applied = _trusted_current(locations, repair=repair)
        current = applied
        if applied is not None and not same_interpreter(applied.python, host):
            current = _ForOtherPython(applied.generation)  # made for another interpreter
    draft = make_plan(loaded, lock, host, current, strict=strict, recorded=recorded)
    shas = [a.sha256 for a in draft.artifacts]
    plan = with_presence(draft, _cached(locations, shas), _stored(locations, shas))
    plan = with_pth_findings(plan, locations.store, loaded.profile.overlay.allow_pth)
    return attrs.evolve(plan, inputs=attrs.evolve(plan.inputs, locations=locations))


@attrs.frozen
class _ForOtherPython:
    """The applied generation as a plan for another host interpreter sees it: never up to
    date (its console scripts and manifest name the other interpreter)."""

    generation: str

    def matches(self, profile_digest: str, lock_digest: str | None, native: str | None) -> bool:
        return False


def same_interpreter(applied: str | None, host: HostSnapshot) -> bool:
    """Was a generation whose manifest records ``applied`` made for ``host``'s interpreter?
    Unknown on either side counts as the same (older manifests, snapshots without a path)."""
    probed = host.python.executable
    return applied is None or probed is None or applied == probed


def _trusted_current(locations: Locations, *, repair: bool = False) -> Manifest | None:
    """The current manifest, or None when its bytes do not match the pointer's digest (an
    edited manifest is nothing valid applied: the apply builds a fresh generation); with
    ``repair``, also when the pointer or the manifest cannot be read at all."""
    from kvenv.errors import KvenvError

    try:
        return current_state(locations)[1]
    except IntegrityError:
        return None
    except KvenvError:
        if repair:
            return None
        raise


def _stored(locations: Locations, shas: list[str]) -> frozenset[str]:
    from kvenv.env.store import lookup

    return frozenset(s for s in shas if lookup(locations.store, s) is not None)


def _cached(locations: Locations, shas: list[str]) -> frozenset[str]:
    from kvenv.fetch.cache import ArtifactCache

    cache = ArtifactCache(locations.cache)
    return frozenset(s for s in shas if cache.has(s))


def noop_fast(
    loaded: LoadedProfile,
    locations: Locations,
    host: Callable[[], HostSnapshot],
    recorded: Callable[[], HostSnapshot | None],
    *,
    keep: int = DEFAULT_KEEP,
) -> tuple[str, str] | None:
    """``(generation, manifest path)`` when applying ``loaded`` is certainly a no-op, judged
    without reading the lock or the store; None when unsure (then plan and apply in full).

    A no-op needs: no apply in progress; a current manifest that validates, was written by
    this kvenv and records this profile's digest, the sha256 of the lock file's bytes and the
    profile's native wheel; its generation's dirs present; no other generation to clean up; the
    activation scripts as an apply would write them; a manifest made for the live host's
    interpreter (:func:`same_interpreter`); and a live host that still passes the
    profile's target checks. The lock's own checks and the native wheel's tags are functions
    of the profile and the lock bytes, which passed them when the manifest was written. A
    profile without ``[target]`` (its target is the host) always takes the full path.
    """
    from kvenv.probe.checks import check_host

    profile = loaded.profile
    if profile.target is None or not is_owned(locations.root):
        return None
    if read_owner(locations.root) != owner_of(loaded):
        return None  # another profile's root, or one to adopt: the full path decides
    memo.note("stat", str(owner_file(locations)))  # an apply running: asked, not read
    if owner_file(locations).exists():
        return None
    lock_digest = None
    if has_lock(loaded):
        lock_digest = file_digest(loaded.lock_path)
        if lock_digest is None:
            return None
    try:
        pointer, manifest = current_state(locations)
    except (InputError, IntegrityError):
        return None
    if pointer is None or manifest is None or manifest.kvenv_version != __version__:
        return None
    native_sha = profile.native.sha256 if profile.native else None
    if not manifest.matches(loaded.digest, lock_digest, native_sha) or not dirs_present(manifest):
        return None
    must = {pointer.generation} | ({pointer.previous} if pointer.previous else set())
    kept = retained(must, complete_generations(locations), keep)
    if not set(list_generations(locations)) <= kept or not shims_current(locations, manifest):
        return None
    if not same_interpreter(manifest.python, host()):
        return None  # applied for another host interpreter: rebuild for this one
    findings = check_host(profile, host(), recorded=recorded())
    if any(f.status == "error" for f in findings):
        return None
    return manifest.generation, str(manifest_path(locations.root, manifest.generation))


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


def _refuse_misordered(plan: Plan) -> None:
    """Every step's prerequisites must come before it in the plan."""
    from kvenv.plan.make import STEP_REQUIRES

    seen: set[StepName] = set()
    for step in plan.steps:
        missing = [need for need in STEP_REQUIRES[step.name] if need not in seen]
        if missing:
            raise InputError(
                f"the plan cannot be executed: step {step.name!r} needs "
                f"{' and '.join(repr(m) for m in missing)} before it",
                hint="nothing was changed; make the plan again with `kvenv plan`",
            )
        seen.add(step.name)


def _locations(plan: Plan) -> Locations:
    locations = plan.inputs.locations
    if locations is None:
        raise InputError(
            "the plan was made without a runtime root and cannot be applied",
            hint="plan with kvenv.env.apply.plan_apply (or `kvenv apply`)",
        )
    return locations


def _pointer(root: Path, *, repair: bool) -> Pointer | None:
    """The root's pointer; with ``repair`` an unreadable one counts as none (rebuilt)."""
    if not repair:
        return read_pointer(root)
    try:
        return read_pointer(root)
    except InputError:
        return None


def _replan(plan: Plan, *, repair: bool) -> Plan:
    inputs = plan.inputs
    return plan_apply(
        inputs.loaded,
        inputs.lock,
        inputs.host,
        _locations(plan),
        strict=inputs.strict,
        recorded=inputs.recorded,
        repair=repair,
    )


# -- apply -------------------------------------------------------------------------------------


def apply(plan: Plan, options: ApplyOptions | None = None) -> ApplyResult:
    """Execute ``plan`` (from :func:`plan_apply`) as ``options`` say."""
    options = options or ApplyOptions()
    locations = _locations(plan)
    root = locations.root
    # Refuse before anything is written: a refused apply creates no root.
    _refuse_incompatible(plan)
    _refuse_misordered(plan)
    _refuse_misplaced(plan, locations)
    if options.dry_run:
        return ApplyResult("dry-run", plan, str(root), plan.current_generation, None)
    made = not os.path.lexists(root)
    claim_root(root)
    with RootLock(locations, wait=options.wait, on_wait=options.on_wait), _given_up(root, made):
        _refuse_given_up(root)
        take_ownership(root, owner_of(plan.inputs.loaded))
        pointer = _pointer(root, repair=options.repair)
        keep = {pointer.generation} if pointer else set()
        if pointer and pointer.previous:
            keep.add(pointer.previous)
        cleaned = remove_generations(locations, keep, incomplete_only=True)
        remove_stray_temps(root)  # what a killed run's atomic writes left beside the root files
        # The plan stays right while the generation it was made over is still current
        # (generations are immutable, their ids unique); another apply switched the root in
        # between: plan again against what is there now.
        if (pointer.generation if pointer else None) != plan.current_generation:
            plan = _replan(plan, repair=options.repair)
            _refuse_incompatible(plan)
        if plan.up_to_date and pointer is not None and not options.repair:
            _, manifest = current_state(locations)
            if manifest is not None and dirs_present(manifest):
                write_shims(locations, manifest)
                kept = retained(keep, complete_generations(locations), options.keep)
                removed = remove_generations(locations, kept, incomplete_only=False)
                return ApplyResult(
                    "up-to-date",
                    plan,
                    str(root),
                    manifest.generation,
                    str(manifest_path(root, manifest.generation)),
                    removed=cleaned + removed,
                )
        result = _Run(plan, locations, pointer, options).execute()
        return attrs.evolve(result, removed=cleaned + result.removed)


def _refuse_misplaced(plan: Plan, locations: Locations) -> None:
    """Refuse a root or cache that is a file, or lies where kvenv must not write
    (:mod:`kvenv.env.placecheck`), before anything is written."""
    from kvenv.env.placecheck import check_places, host_places, refuse_file_places

    refuse_file_places(locations)
    python = plan.inputs.host.python
    sites = [*python.sys_path, *(d.location for d in plan.inputs.host.distributions if d.location)]
    check_places(locations, host_places(python.executable, sites))


@contextlib.contextmanager
def _given_up(root: Path, made: bool) -> Iterator[None]:
    """A first apply that fails for any reason claims nothing: where nothing was ever applied,
    kvenv's own files go again, and the root directory when this apply ``made`` it
    (:func:`kvenv.env.rootfiles.unclaim_root`)."""
    try:
        yield
    except BaseException:
        if made or not (root / POINTER_NAME).exists():
            unclaim_root(root, remove_dir=made)
        raise


def _refuse_given_up(root: Path) -> None:
    """Refuse to go on in a root a failed first apply gave up while this one waited."""
    if not is_owned(root):
        raise ConflictError(
            f"the runtime root {root} was given up by another apply while this one waited",
            hint="run `{kvenv apply}` again",
        )


def _fetch_progress(progress: Progress | None) -> Progress | None:
    kill_mid = os.environ.get(KILL_ENV) == "mid-fetch"
    if progress is None and not kill_mid:
        return None

    def report(label: str, done: int, total: int | None) -> None:
        if kill_mid and done > 0 and (total is None or done < total):
            kill_point("mid-fetch")
        if progress is not None:
            progress(label, done, total)

    return report


@attrs.define
class _Run:
    """One execution of a plan's steps; each step leaves its result here for the next."""

    plan: Plan
    locations: Locations
    pointer: Pointer | None
    options: ApplyOptions
    files: dict[str, Path] = attrs.field(factory=dict)
    entries: dict[str, StoreEntry] | None = None
    bytecode: dict[str, Bytecode] | None = None
    # The pipeline: wheels unpacked as they arrive, each entry compiled once unpacked.
    unpacker: Unpacker | None = None
    compiler: Compiler | None = None
    generation: str | None = None
    native: LinkedLayer | None = None
    overlay: LinkedLayer | None = None
    manifest: Manifest | None = None
    switched: bool = False
    warnings: list[str] = attrs.field(factory=list)  # damaged cache or store entries replaced
    notices: list[str] = attrs.field(factory=list)  # warnings that repaired nothing

    @property
    def loaded(self) -> LoadedProfile:
        return self.plan.inputs.loaded

    @property
    def protected(self) -> list[str]:
        return list(self.loaded.profile.host.protected)

    @property
    def waivers(self) -> list[str]:
        return [w.name for w in self.loaded.profile.overlay.record_waivers]

    def artifacts(self, role: str | None = None) -> list[PlanArtifact]:
        return [a for a in self.plan.artifacts if role is None or a.role == role]

    def execute(self) -> ApplyResult:
        steps: dict[StepName, Callable[[], None]] = {
            "fetch": self.fetch,
            "verify": self.verify,
            "install-native": self.install_native,
            "install-overlay": self.install_overlay,
            "write-manifest": self.write_manifest,
            "switch": self.switch,
            "write-shims": self.write_shims,
        }
        try:
            for step in self.plan.steps:
                steps[step.name]()
                kill_point(step.name)
        finally:
            self._close_pipeline()
        root = self.locations.root
        previous = self.pointer.generation if self.pointer else None
        keep = {g for g in (self.generation, previous) if g}
        if not self.switched and self.pointer and self.pointer.previous:
            keep.add(self.pointer.previous)
        keep = retained(keep, complete_generations(self.locations), self.options.keep)
        removed = remove_generations(self.locations, keep, incomplete_only=False)
        if self.options.repair:
            self.warnings.extend(self.remove_strays(keep - {self.generation}))
        manifest = self.manifest
        return ApplyResult(
            "applied",
            self.plan,
            str(root),
            self.generation,
            str(manifest_path(root, manifest.generation)) if manifest else None,
            removed,
            list(manifest.notes) if manifest else [],
            self.warnings + self.notices + (apply_warnings(manifest) if manifest else []),
            tuple(layer for layer in (self.native, self.overlay) if layer is not None),
            bool(self.warnings),
        )

    def remove_strays(self, generations: set[str]) -> list[str]:
        """Remove the files added to the kept ``generations`` (their manifests do not list
        them: :mod:`kvenv.env.strays`); a warning for each. A generation whose manifest cannot
        be read is left as it is (``verify`` reports it)."""
        from kvenv.env.strays import remove_strays
        from kvenv.errors import KvenvError

        out: list[str] = []
        for generation in sorted(g for g in generations if g):
            try:
                path = manifest_path(self.locations.root, generation)
                manifest = read_manifest(path, root=self.locations.root)
            except KvenvError:
                continue
            out += [
                f"removed {path}: added to generation {generation}, not in its manifest"
                for path in remove_strays(manifest)
            ]
        return out

    # -- the steps ---------------------------------------------------------------------------

    def _start_pipeline(self) -> None:
        """Unpack each wheel as soon as it is verified (and compile it once unpacked) while
        the others still download: :class:`kvenv.env.store.Unpacker`."""
        from kvenv.env.bytecode import Compiler
        from kvenv.env.store import Unpacker

        tag = self._tag() if self.options.compile else None
        if tag is not None:
            self.compiler = Compiler(
                self.locations.store,
                python=self.interpreter,
                tag=tag,
                jobs=self.options.jobs,
                full_check=self.options.repair,
            )
            self.compiler.on_damaged = self.warnings.append
        self.unpacker = Unpacker(
            self.locations.store,
            protected=self.protected,
            record_waivers=self.waivers,
            jobs=self.options.jobs,
            progress=self.options.progress,
            full_check=self.options.repair,
            on_damaged=self.warnings.append,
            then=self.compiler.submit if self.compiler is not None else None,
        )

    def _close_pipeline(self) -> None:
        if self.unpacker is not None:
            self.unpacker.close()
            self.unpacker = None
        if self.compiler is not None:
            self.compiler.close()
            self.compiler = None

    def _tag(self) -> str | None:
        from kvenv.env.bytecode import cache_tag

        python = self.plan.inputs.host.python
        known = (python.implementation, python.version, python.executable)
        return cache_tag(self.interpreter, known)

    def fetch(self, artifacts: list[PlanArtifact] | None = None) -> None:
        from kvenv.fetch.core import fetch_all

        if artifacts is None and self.unpacker is None and self.entries is None:
            self._start_pipeline()
        bundle = self.options.bundle
        self.files.update(
            fetch_all(
                [a.artifact for a in (self.artifacts() if artifacts is None else artifacts)],
                cache=self.locations.cache,
                offline=self.options.offline or bundle is not None,
                bundle=bundle.local_files() if bundle is not None else None,
                jobs=self.options.jobs,
                progress=_fetch_progress(self.options.progress),
                rehash_cached=self.options.repair,
                on_ready=self.unpacker.submit if self.unpacker is not None else None,
            )
        )

    def verify(self) -> None:
        missing = [a.artifact.label for a in self.artifacts() if a.sha256 not in self.files]
        if missing:
            raise InputError(f"artifacts missing after fetch: {', '.join(missing)}")

    def _unpacked(self) -> dict[str, StoreEntry]:
        """Every wheel of the plan in the store (unpacked once, in parallel, on first use); a
        waived RECORD is accepted while unpacking, and linking accepts it in the overlay only."""
        from kvenv.errors import KvenvError

        if self.entries is None:
            try:
                if self.unpacker is not None:
                    wheels = {a.sha256: self.files[a.sha256] for a in self.artifacts()}
                    self.entries = self.unpacker.results(wheels)
                else:
                    self.entries = self._unpack_all()
            except KvenvError:
                self._close_pipeline()
                # A wheel that fails to unpack may be a cached file damaged in place (same
                # size and mtime): re-hash the cached files; fetch the damaged ones again.
                if not self._refetch_damaged():
                    raise
                self.entries = self._unpack_all()
        return self.entries

    def _compiled(self) -> dict[str, Bytecode]:
        """The bytecode of every unpacked wheel for the host interpreter (compiled once per
        store entry and cache tag: :mod:`kvenv.env.bytecode`); none with ``compile`` off, or
        when the interpreter cannot compile (a warning: imports then compile from source)."""
        from kvenv.env.bytecode import compile_entries
        from kvenv.errors import InstallError

        if self.bytecode is None:
            self.bytecode = {}
            entries = self._unpacked()  # first: a failed pipeline is closed, its compiler too
            tag = self._tag() if self.options.compile else None
            try:
                if self.compiler is not None:
                    self.bytecode = self.compiler.results(entries)
                elif tag is not None:
                    self.bytecode = compile_entries(
                        self.locations.store,
                        entries,
                        python=self.interpreter,
                        tag=tag,
                        jobs=self.options.jobs,
                        full_check=self.options.repair,
                        on_damaged=self.warnings.append,
                    )
            except InstallError as exc:
                self.notices.append(f"{exc.message}; the generation has no bytecode")
        return self.bytecode

    def _unpack_all(self) -> dict[str, StoreEntry]:
        from kvenv.env.store import unpack_all

        wheels = {a.sha256: self.files[a.sha256] for a in self.artifacts()}
        return dict(
            unpack_all(
                self.locations.store,
                wheels,
                protected=self.protected,
                record_waivers=self.waivers,
                jobs=self.options.jobs,
                full_check=self.options.repair,
                on_damaged=self.warnings.append,
                progress=self.options.progress,
            )
        )

    def _refetch_damaged(self) -> bool:
        """Re-hash every cached wheel of the plan; a damaged one is evicted from the cache and
        fetched again (with a warning), or, with no network, named in the error. False when
        every file is sound (then the wheel itself is bad)."""
        from kvenv._util.hashing import sha256_file
        from kvenv.errors import FetchError, Problem

        damaged = []
        for artifact in self.artifacts():
            path = self.files[artifact.sha256]
            if sha256_file(path)[0] != artifact.sha256:
                damaged.append((artifact, path))
        if not damaged:
            return False
        cached = [(a, p) for a, p in damaged if p.is_relative_to(self.locations.cache)]
        for _, path in cached:
            remove_cache_entry(path)
        if self.options.offline or self.options.bundle is not None or len(cached) < len(damaged):
            raise FetchError(
                f"{len(damaged)} artifact file(s) are damaged (their sha256 is not the pinned one)",
                problems=[Problem(f"{path} ({a.artifact.label})") for a, path in damaged],
                hint="nothing was installed; the damaged cached files were removed: run "
                "`{kvenv apply}` with network access to download them again (a damaged bundle: "
                "make it again with `{kvenv bundle -o kvenv-bundle}` on a connected machine)",
            )
        for artifact, path in damaged:
            self.warnings.append(
                f"the cached {path} was damaged (sha256 differs from its pin); downloaded again"
            )
            del self.files[artifact.sha256]
        self.fetch([a for a, _ in damaged])
        return True

    def _layout(self, layer: str) -> GenerationLayout:
        from kvenv.env.store import GenerationLayout

        if self.generation is None:
            self.generation = new_generation_id()
            gen = generation_dir(self.locations.root, self.generation)
            gen.mkdir(parents=True)
            for name in ("native", "overlay"):
                GenerationLayout.beside(gen / name).site.mkdir()
            GenerationLayout.beside(gen / "native").bin.mkdir()  # shared by both layers
        return GenerationLayout.beside(generation_dir(self.locations.root, self.generation) / layer)

    @property
    def interpreter(self) -> str:
        return self.options.python or self.plan.inputs.host.python.executable or sys.executable

    def _install(self, role: Literal["native", "overlay"]) -> LinkedLayer:
        from kvenv.env.store import link_layer

        entries = self._unpacked()
        bytecode = self._compiled()
        layout = self._layout(role)
        chosen = [entries[a.sha256] for a in self.artifacts(role)]
        overlay = role == "overlay"  # the profile's waivers and allowed .pth apply to it alone
        return link_layer(
            chosen,
            layout,
            python=self.interpreter,
            protected=self.protected,
            record_waivers=self.waivers if overlay else (),
            layer=role,
            jobs=self.options.jobs,
            progress=self.options.progress,
            allow_pth=[w.name for w in self.loaded.profile.overlay.allow_pth] if overlay else (),
            bytecode=bytecode,
        )

    def install_native(self) -> None:
        self.native = self._install("native")

    def install_overlay(self) -> None:
        self.overlay = self._install("overlay")

    def write_manifest(self) -> None:
        assert self.generation is not None
        self.manifest = build_manifest(self)
        write_manifest(manifest_path(self.locations.root, self.generation), self.manifest)

    def switch(self) -> None:
        assert self.generation is not None
        previous = self.pointer.generation if self.pointer else None
        write_pointer(self.locations.root, self.generation, previous)
        self.switched = True

    def write_shims(self) -> None:
        assert self.manifest is not None
        write_shims(self.locations, self.manifest)


def remove_cache_entry(path: Path) -> None:
    """Remove a cached artifact file and its cache entry directory (kvenv's own layout)."""
    from kvenv.env.seal import remove_sealed

    remove_sealed(path.parent)


# -- the manifest ------------------------------------------------------------------------------


def native_source_text(loaded: LoadedProfile) -> str:
    """How the manifest records where the native wheel came from."""
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


def build_manifest(run: _Run) -> Manifest:
    """The manifest of the generation ``run`` built."""
    from kvenv.env.activation import build_activation
    from kvenv.env.store import GenerationLayout

    assert run.generation is not None
    loaded, host = run.loaded, run.plan.inputs.host
    root = run.locations.root
    gen = generation_dir(root, run.generation)
    native_layout = GenerationLayout.beside(gen / "native")
    overlay_layout = GenerationLayout.beside(gen / "overlay")
    layers = [(run.native, "native"), (run.overlay, "overlay")]
    installed: list[InstalledDistribution] = []
    conflicts = []
    hooks: list[ExecutablePth] = []
    for layer, role in layers:
        if layer is None:
            continue
        conflicts.extend(layer.conflicts)
        hooks.extend(hook for d in layer.dists for hook in d.executable_pth)
        shas = [a.sha256 for a in run.artifacts(role)]
        installed.extend(
            InstalledDistribution(
                name=d.name,
                version=d.version,
                layer="native" if role == "native" else "overlay",
                dist_info=d.dist_info,
                record_digest=d.record_digest,
                wheel_sha256=Sha256(sha),
                top_level=list(d.top_level),
                scripts=list(d.scripts),
                record_waived=list(d.record_waived),
            )
            for d, sha in zip(layer.dists, shas, strict=True)
        )
    from kvenv.env.kvenvlib import expose_kvenv

    provided = [d.name for d in host.distributions] + [d.name for d in installed]
    lib_key, lib_notes = expose_kvenv(gen, provided, run.locations.store)
    activation, notes = build_activation(
        generation=gen,
        overlay=overlay_layout.site,
        native=native_layout.site,
        bin_dir=native_layout.bin,
        host=host,
        env={str(k): v for k, v in loaded.profile.runtime.env.items()},
        protected=run.protected,
    )
    native = loaded.profile.native
    lock = run.plan.inputs.lock
    return Manifest(
        schema=1,
        kvenv_version=__version__,
        created_at=now(),
        root=str(root),
        dirs=GenerationDirs(
            generation=run.generation,
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
        protected=run.protected,
        host_protected=_host_protected(loaded, host),
        python=run.interpreter,
        notes=notes + lib_notes,
        conflicts=conflicts,
        executable_pth=hooks,
        kvenv_lib=Sha256(lib_key),
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


__all__ = [
    "KILL_ENV",
    "ApplyOptions",
    "ApplyResult",
    "apply",
    "apply_warnings",
    "noop_fast",
    "plan_apply",
    "same_interpreter",
]
