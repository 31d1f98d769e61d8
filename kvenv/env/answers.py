"""What ``kvenv apply`` (a no-op), ``kvenv status`` and ``kvenv plan`` answered, the generation
an apply built in a new root, and a bundle already verified: memo kinds ``answer``,
``generation`` and ``bundle`` (:mod:`kvenv._util.memo`), so that repeating a command costs file
reads, not the model (issue 13).

**Recording.** A command's full path runs inside :class:`Recording`, the memo's recording
seam: every input it reads through kvenv's readers is a dependency, by the sha256 of the very
bytes it parsed (the profile's files, the root's marker, pointer, generations listing and
manifest, the activation scripts, the lock and the host snapshots) or by what was looked at
(the root lock's owner sidecar, the generation's dirs, each artifact's cache entry and store
marker the plan looks up). Added to them: every ``KVENV_*`` variable and, for apply and a plan
without ``--host``, the live host's identity (:func:`kvenv.probe.host.watch_probe`). An
answer is kept once the command succeeded, keyed by the command, the profile reference, the
working directory, the flags, the profile's facts (:func:`kvenv.model.facts.cached_facts`,
valid only while its files are unchanged) and places, the host interpreter as resolved and
``sys.path``.

**Recalling.** :func:`recall_answer` (and :func:`recall_apply`) compute the same key from the facts
alone and return the answer when every dependency is unchanged (the host replayed by
:func:`kvenv.probe.hostmemo.host_unchanged`); anything else is a miss and the command takes
its full path, which decides and reports as always. Never under ``--verbose`` (its lines come
from the full path).

A **generation** recorded in a new root (:meth:`Recording.keep_generation`,
:func:`kvenv.env.recall.recipe`) depends on nothing inside that root: its key leaves out the
root (the path, ``--root``, ``$KVENV_ROOT``), its dependencies are what the full path read
outside the root and the cache, plus, captured once built, each artifact's cache entry (every
file by the identity the cache trusts), each store entry's marker by its bytes and the
bundle's files; :func:`recall_apply` replays it into the next new root
(:func:`kvenv.env.recall.replay`).

A **bundle** (:func:`kvenv.fetch.bundle.open_bundle`) is one record per bundle path, valid
while every file under it has the same identity, ctime included; :func:`recalled_bundle` reads
its profile file without opening it. Standard library only at import: on the start-up paths.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kvenv._util import memo

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Callable
    from typing import Any

    from kvenv.env.apply import ApplyResult
    from kvenv.env.recall import Built
    from kvenv.model.facts import ProfileFacts
    from kvenv.model.loading import LoadedProfile
    from kvenv.model.locations import Locations
    from kvenv.probe.interpreter import HostPython

    Prelude = tuple[ProfileFacts, tuple[Any, ...], HostPython | None]

# What else an answer's key holds, per command (the generation's: not the root).
_FLAGS = {
    "answer": ("root", "cache", "python", "keep"),
    "generation": ("cache", "python", "keep", "no_compile"),
}
# The variables a generation does not depend on: where the new root is, and the tests' fault
# injection (which only stops the process).
_NOT_GENERATION = ["KVENV_ROOT", "KVENV_TEST_KILL_AT"]


def _memo_root(args: Any) -> Path:
    from kvenv.model.places import memo_root

    return memo_root(getattr(args, "cache", None))


def _host_unchanged(identity: Any) -> bool:
    from kvenv.probe.hostmemo import host_unchanged

    return host_unchanged(identity)


def _bundle_path(bundle: str | os.PathLike[str]) -> str:
    return str(Path(bundle).expanduser().absolute())


def _facts_places(args: Any) -> tuple[ProfileFacts, tuple[Any, ...]] | None:
    from kvenv.errors import KvenvError
    from kvenv.model.facts import cached_facts
    from kvenv.model.places import choose_places

    try:
        facts = cached_facts(args.profile, cache=args.cache)
        if facts is None:
            return None
        places = choose_places(
            facts.name,
            root=args.root,
            cache=args.cache,
            configured_root=facts.configured_root,
            configured_cache=facts.configured_cache,
            environ=os.environ,
        )
    except (KvenvError, OSError):
        return None
    return facts, tuple(places)


def _python(args: Any, facts: ProfileFacts) -> HostPython | None:
    from kvenv.errors import KvenvError
    from kvenv.probe.interpreter import resolve_host_python

    path = facts.host_python
    try:
        return resolve_host_python(
            flag=getattr(args, "python", None),
            environ=os.environ,
            profile_value=str(path) if path is not None else None,
            profile_file=str(facts.path),
        )
    except KvenvError:
        return None  # the full path reports it


def _key(
    kind: str,
    command: str,
    args: Any,
    facts: ProfileFacts,
    places: tuple[Any, ...],
    python: HostPython | None,
) -> dict[str, Any]:
    key: dict[str, Any] = {
        "command": command,
        "ref": args.profile,
        "cwd": os.getcwd(),
        "flags": {k: getattr(args, k, None) for k in _FLAGS[kind]},
        "profile": [facts.name, str(facts.path), facts.origin, facts.digest],
        "owner": list(facts.owner),  # resolved now: a profile reached through a new symlink
        "places": [str(p) for p in (places if kind == "answer" else places[2:])],
    }
    if command == "plan":
        key["plan"] = {"json": bool(args.json), "strict": bool(args.strict), "host": args.host}
    if python is not None:
        key["python"] = [python.path, python.source, python.own, python.note]
        key["sys_path"] = list(sys.path)  # one record per way of starting kvenv (-m, a script)
    if kind == "generation":
        bundle = getattr(args, "bundle", None)
        key["bundle"] = _bundle_path(bundle) if bundle else None
        key["offline"] = bool(getattr(args, "offline", False))
    return key


def _get(args: Any, kind: str, key: Any) -> Any:
    from kvenv.errors import KvenvError

    try:
        return memo.get(_memo_root(args), kind, key, host=_host_unchanged)
    except KvenvError:  # an empty --cache: the full path reports it
        return None


def _usable(command: str, value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if command == "apply":
        return isinstance(value.get("generation"), str)
    if command == "plan":
        lines = value.get("lines")
        shown = ("json" in value) != (
            isinstance(lines, list) and all(isinstance(line, str) for line in lines)
        )
        return isinstance(value.get("code"), int) and shown
    return True


def _prelude(command: str, args: Any) -> Prelude | None:
    """(facts, places, host python) a recall starts from; None under ``--verbose``, without
    a facts record, or with a host python the full path has to report on."""
    if int(getattr(args, "verbosity", 0) or 0) > 0:
        return None  # its lines come from the full path
    found = _facts_places(args)
    if found is None:
        return None
    facts, places = found
    if command == "plan" and args.host:
        return facts, places, None  # --host SNAPSHOT: the full path resolves no python
    python = _python(args, facts)
    return None if python is None else (facts, places, python)


def _recall(command: str, args: Any, found: Prelude) -> dict[str, Any] | None:
    facts, places, python = found
    keyed = None if command == "status" else python  # status prints the python it resolves
    value = _get(args, "answer", _key("answer", command, args, facts, places, keyed))
    return value if _usable(command, value) else None


def recall_answer(command: str, args: Any) -> tuple[HostPython | None, dict[str, Any]] | None:
    """``(host python, the answer)`` the full path of ``command`` (``apply``, ``status`` or
    ``plan``) gave for this invocation, when nothing it read changed; else None. The host
    python is None for a plan with ``--host`` (the full path resolves none then)."""
    found = _prelude(command, args)
    answer = None if found is None else _recall(command, args, found)
    return None if found is None or answer is None else (found[2], answer)


class RecalledApply:
    """What :func:`recall_apply` recalled: a no-op (``built`` None: ``value`` holds the
    generation) or a generation replayed into a new root (``value``: its recipe)."""

    __slots__ = ("built", "name", "python", "root", "value")

    def __init__(
        self, python: HostPython, root: str, name: str, value: dict[str, Any], built: Built | None
    ) -> None:
        self.python, self.root, self.name, self.value, self.built = python, root, name, value, built


def recall_apply(args: Any, on_wait: Callable[[str], None]) -> RecalledApply | None:
    """A no-op ``kvenv apply`` by its recorded answer, or, into a root that does not exist
    yet, the generation the full path built in another new root made again here
    (:func:`kvenv.env.recall.replay`); None when neither can be (then nothing is built and
    the full path runs)."""
    found = _prelude("apply", args)
    if found is None:
        return None
    facts, places, python = found
    assert python is not None
    root = Path(places[0])
    answer = _recall("apply", args, found)
    if answer is not None:
        return RecalledApply(python, str(root), facts.name, answer, None)
    if os.path.lexists(root):
        return None
    recipe = _get(args, "generation", _key("generation", "apply", args, facts, places, python))
    try:
        interpreter = recipe["manifest"]["python"]
    except (KeyError, TypeError):
        return None
    if not isinstance(interpreter, str) or not os.path.isabs(interpreter):
        return None
    from kvenv.env.placecheck import host_places, misplaced

    if misplaced(str(root), str(places[2]), host_places(interpreter)) is not None:
        return None  # the full path refuses it, and says why
    from kvenv.env.recall import replay  # only with a recipe to replay

    jobs = max(1, min(int(getattr(args, "jobs", 8) or 1), os.cpu_count() or 1))
    built = replay(
        recipe,
        root,
        Path(places[2]) / "store",
        python=interpreter,
        jobs=jobs,
        wait=not getattr(args, "no_wait", False),
        on_wait=on_wait,
    )
    return None if built is None else RecalledApply(python, str(root), facts.name, recipe, built)


def recalled_bundle(args: Any) -> str | None:
    """The profile file of the bundle ``--from`` names, when an earlier apply opened and
    verified it and no file under it changed identity since; else None."""
    if int(getattr(args, "verbosity", 0) or 0) > 0:
        return None
    value = _get(args, "bundle", _bundle_path(args.bundle))
    profile = value.get("profile") if isinstance(value, dict) else None
    return profile if isinstance(profile, str) else None


def bundle_memo(args: Any) -> Path | None:
    """Where :func:`kvenv.fetch.bundle.open_bundle` keeps its ``bundle`` record for this
    invocation (None: ``--repair`` hashes every file, or no usable memo root)."""
    from kvenv.errors import KvenvError

    if getattr(args, "repair", False):
        return None
    try:
        return _memo_root(args)
    except KvenvError:
        return None


class Recording:
    """The full path of ``command`` (``apply``, ``status`` or ``plan``) being recorded: a
    ``with`` block around it (the memo's seam); :attr:`host` is set by whoever probes the
    live host (:func:`kvenv.probe.host.watch_probe`)."""

    def __init__(self, command: str, args: Any) -> None:
        self.command = command
        self.args = args
        self.host: dict[str, Any] | None = None
        self._seam = memo.recording()
        self.reads = memo.Reads()

    def __enter__(self) -> Recording:
        self.reads = self._seam.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._seam.__exit__(*exc)

    def _later(self, keep: Callable[[], None]) -> None:
        """``keep`` once the command succeeded (after the profile's facts are recorded)."""
        on_success = getattr(self.args, "on_success", None)
        if on_success is None:
            keep()
        else:
            on_success.append(keep)

    def _put(
        self,
        kind: str,
        locations: Locations,
        python: HostPython | None,
        deps: Callable[[], list[Any]],
        value: Any,
    ) -> None:
        from kvenv.errors import KvenvError

        found = _facts_places(self.args)
        if found is None or (found[1][0], found[1][2]) != (locations.root, locations.cache):
            return  # keyed by the paths a recall computes: only when they are these
        facts, places = found
        key = _key(kind, self.command, self.args, facts, places, python)
        try:
            memo.put(_memo_root(self.args), kind, key, deps(), value)
        except KvenvError:
            return

    def keep(
        self, locations: Locations, value: dict[str, Any], python: HostPython | None = None
    ) -> None:
        """Keep ``value`` as the answer (with ``python``, the host interpreter it was decided
        for: only with the live host's identity in :attr:`host`)."""
        if python is not None and self.host is None:
            return
        deps = [*self.reads.deps, memo.dep("env", ["KVENV_*", []])]
        if self.host is not None:
            deps.append(["host", None, self.host])
        self._later(lambda: self._put("answer", locations, python, lambda: deps, value))

    def keep_generation(
        self,
        loaded: LoadedProfile,
        locations: Locations,
        result: ApplyResult,
        findings: list[str],
        python: HostPython,
    ) -> None:
        """Keep the recipe of the generation ``result`` built in the new root of
        ``locations`` (see the module; ``findings``: the plan's warnings it printed); nothing
        without the live host's identity, or after a repair."""
        from kvenv.env.recall import recipe
        from kvenv.env.root import owner_of

        if self.host is None or result.repaired or result.generation is None:
            return
        owner = owner_of(loaded)
        made = recipe(
            root=str(locations.root), generation=result.generation, store=str(locations.store),
            owner=(owner.name, owner.file), layers=result.layers, findings=findings,
            notes=result.notes, warnings=result.warnings,
        )  # fmt: skip
        if made is None:
            return
        shas = [artifact.sha256 for artifact in result.plan.artifacts]
        inside = (f"{locations.root}/", f"{locations.cache}/")
        deps = [
            d
            for d in self.reads.deps
            if not (isinstance(d[1], str) and f"{d[1]}/".startswith(inside))
        ]
        deps += [memo.dep("env", ["KVENV_*", _NOT_GENERATION]), ["host", None, self.host]]
        bundle = getattr(self.args, "bundle", None)

        def built() -> list[Any]:  # the cache and store as the generation was built from them
            from kvenv.env.store import MARKER, entry_dir
            from kvenv.fetch.cache import ArtifactCache

            cache = ArtifactCache(locations.cache)
            found = [memo.dep("tree", [str(cache.entry(sha)), False]) for sha in shas]
            lib = [made["kvenv_lib"]] if made.get("kvenv_lib") else []  # kvenv.env.kvenvlib
            shown = [*made["entries"], *lib]
            markers = [str(entry_dir(locations.store, sha) / MARKER) for sha in shown]
            found += [memo.dep("bytes", marker) for marker in markers]
            if bundle:
                found.append(memo.dep("tree", [_bundle_path(bundle), True]))
            return [*deps, *found]

        self._later(lambda: self._put("generation", locations, python, built, made))
