"""The start-up paths of ``kvenv apply`` (a no-op), ``kvenv status`` and ``kvenv plan``: their
answer recalled from :mod:`kvenv.env.quickstate` when nothing it was decided on changed, and
recorded after the full path decided it (issue 13). A plan's answer is what it printed (its
lines, or its JSON document) and its exit code.

A recalled answer prints exactly what the full path prints (stdout, stderr, exit code);
anything unsure (no facts record, no answer recorded, any input changed, ``--verbose``, an
error) returns None and the command takes its full path, which decides and reports as always.
Imports nothing heavier than the profile's facts, the places rule, the host interpreter rule
and the state reader.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvenv._util.identity import sha256_hex

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvenv.env.recall import Built
    from kvenv.model.facts import ProfileFacts
    from kvenv.model.loading import LoadedProfile
    from kvenv.model.locations import Locations
    from kvenv.probe.interpreter import HostPython


def _env_digest(*, but: tuple[str, ...] = ()) -> str:
    """Every ``KVENV_*`` variable (hashed: one may hold a secret) except ``but``: any of them
    may change where a command looks or what it decides."""
    items = sorted((k, v) for k, v in os.environ.items() if k.startswith("KVENV_") and k not in but)
    return sha256_hex(json.dumps(items).encode("utf-8", "surrogateescape"))


def _memo_dir(args: argparse.Namespace) -> Path:
    from kvenv.env.quickstate import ANSWERS_DIR
    from kvenv.model.places import memo_root

    return memo_root(getattr(args, "cache", None)) / ANSWERS_DIR


def _key(
    command: str, args: argparse.Namespace, facts: ProfileFacts, places: tuple[Any, ...]
) -> dict[str, Any]:
    from kvenv import __version__

    return {
        "command": command,
        "version": __version__,
        "ref": args.profile,
        "cwd": os.getcwd(),
        "env": _env_digest(),
        "flags": {k: getattr(args, k, None) for k in ("root", "cache", "python", "keep")},
        "profile": [facts.name, str(facts.path), facts.origin, facts.digest],
        "owner": list(facts.owner),  # resolved now: a profile reached through a new symlink
        "places": [str(p) for p in places],
    }


def _python_row(python: HostPython) -> list[Any]:
    return [python.path, python.source, python.own, python.note]


def _facts_and_places(args: argparse.Namespace) -> tuple[ProfileFacts, tuple[Any, ...]] | None:
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


def _places_of(
    args: argparse.Namespace, locations: Locations
) -> tuple[ProfileFacts, tuple[Any, ...]] | None:
    """The profile's facts and places when they resolve to the root and cache the full path
    used (a record is keyed by the paths a recall will compute); else None."""
    found = _facts_and_places(args)
    if found is None or (found[1][0], found[1][2]) != (locations.root, locations.cache):
        return None
    return found


def _resolve_python(args: argparse.Namespace, facts: ProfileFacts) -> HostPython | None:
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


def _eligible(args: argparse.Namespace) -> bool:
    from kvenv.cli import _io

    return _io.VERBOSITY <= 0  # --verbose lines come from the full path


Prelude = tuple["ProfileFacts", tuple[Any, ...], "HostPython"]


def prelude(args: argparse.Namespace) -> Prelude | None:
    """(facts, places, host python) a recall of ``apply`` or ``status`` starts from; None
    when it cannot be recalled (``--verbose``, no facts record, a host python the full path
    has to report on)."""
    if not _eligible(args):
        return None
    found = _facts_and_places(args)
    if found is None:
        return None
    facts, places = found
    python = _resolve_python(args, facts)
    return None if python is None else (facts, places, python)


# -- recall ------------------------------------------------------------------------------------


def recalled_noop(args: argparse.Namespace, found: Prelude) -> tuple[HostPython, str, str] | None:
    """``(host python, generation, root)`` when ``kvenv apply`` is a no-op by a recorded
    answer of the full path that still holds (``found``: :func:`prelude`); else None."""
    from kvenv.env.quickstate import recall_answer

    facts, places, python = found
    key = _key("apply", args, facts, places) | {"python_row": _python_row(python)}
    key["sys_path"] = list(sys.path)  # one record per way of starting kvenv (-m, a script)
    answer = recall_answer(_memo_dir(args), key)
    if answer is None or not isinstance(answer.get("generation"), str):
        return None
    return python, answer["generation"], str(places[0])


def recalled_status(args: argparse.Namespace) -> tuple[HostPython, dict[str, Any]] | None:
    """``(host python, what root_status reported)`` by a recorded answer that still holds."""
    from kvenv.env.quickstate import recall_answer

    found = prelude(args)
    if found is None:
        return None
    facts, places, python = found
    answer = recall_answer(_memo_dir(args), _key("status", args, facts, places))
    if answer is None:
        return None
    return python, answer


def _plan_flags(args: argparse.Namespace) -> dict[str, Any]:
    """What else a plan's answer depends on: ``--json``, ``--strict`` and ``--host`` (as
    given; the key holds the working directory it is relative to)."""
    return {"json": bool(args.json), "strict": bool(args.strict), "host": args.host}


def recalled_plan(args: argparse.Namespace) -> tuple[HostPython | None, dict[str, Any]] | None:
    """``(host python, the plan's answer)`` by a recorded answer of the full path that still
    holds: ``{"code", "lines"}`` or ``{"code", "json"}``; the host python is None with
    ``--host`` (the full path resolves none then)."""
    from kvenv.env.quickstate import recall_answer

    if not _eligible(args):
        return None
    found = _facts_and_places(args)
    if found is None:
        return None
    facts, places = found
    key = _key("plan", args, facts, places) | {"plan": _plan_flags(args)}
    python = None
    if not args.host:
        python = _resolve_python(args, facts)
        if python is None:
            return None
        key["python_row"] = _python_row(python)
        key["sys_path"] = list(sys.path)
    answer = recall_answer(_memo_dir(args), key)
    if answer is None or not isinstance(answer.get("code"), int):
        return None
    lines = answer.get("lines")
    if lines is not None and not (
        isinstance(lines, list) and all(isinstance(line, str) for line in lines)
    ):
        return None
    if (lines is None) == ("json" not in answer):
        return None
    return python, answer


def _bundle_key(args: argparse.Namespace) -> dict[str, Any]:
    from kvenv import __version__

    return {
        "command": "open-bundle",
        "version": __version__,
        "bundle": str(Path(args.bundle).expanduser().absolute()),
        "cache": args.cache,
        "env": _env_digest(but=("KVENV_ROOT",)),  # verifying a bundle reads no root
    }


def recalled_bundle(args: argparse.Namespace) -> str | None:
    """The profile file of the bundle ``--from`` names, when an earlier apply opened and
    verified it (:func:`kvenv.fetch.bundle.open_bundle`) and no file under it has changed
    identity since (the identity the bundle's seals trust); else None."""
    from kvenv.env.quickstate import recall_answer
    from kvenv.errors import KvenvError

    if not _eligible(args):
        return None
    try:
        answer = recall_answer(_memo_dir(args), _bundle_key(args))
    except KvenvError:  # an empty --cache: the full path reports it
        return None
    profile = None if answer is None else answer.get("profile")
    return profile if isinstance(profile, str) else None


def _generation_key(
    args: argparse.Namespace, facts: ProfileFacts, places: tuple[Any, ...], python: HostPython
) -> dict[str, Any]:
    """What a whole generation recalled into a new root (:mod:`kvenv.env.recall`) is keyed
    by: :func:`_key` without the root (its path, where it came from, ``--root`` and
    ``$KVENV_ROOT``), with the host interpreter, the way kvenv was started, the bundle
    (``--from``) and ``--offline``."""
    key = _key("apply-generation", args, facts, places)
    key["places"] = [str(p) for p in places[2:]]  # the cache and where it came from
    # not the root; nor the tests' fault injection, which only stops the process
    key["env"] = _env_digest(but=("KVENV_ROOT", "KVENV_TEST_KILL_AT"))
    key["flags"] = {k: getattr(args, k, None) for k in ("cache", "python", "keep", "no_compile")}
    key["python_row"] = _python_row(python)
    key["sys_path"] = list(sys.path)
    bundle = getattr(args, "bundle", None)
    key["bundle"] = str(Path(bundle).expanduser().absolute()) if bundle else None
    key["offline"] = bool(getattr(args, "offline", False))
    return key


def recalled_generation(
    args: argparse.Namespace, found: Prelude, on_wait: Callable[[str], None]
) -> tuple[HostPython, str, Built, dict[str, Any]] | None:
    """``(host python, profile name, what was built, the recipe)`` when ``kvenv apply`` into
    a root that does not exist yet was recalled: the generation the full path built in another
    new root with everything it read unchanged, made again here (:func:`kvenv.env.recall.replay`);
    None when it cannot be (then nothing is built and the full path runs)."""
    from kvenv.env.quickstate import recall_answer

    facts, places, python = found
    root = Path(places[0])
    if os.path.lexists(root):
        return None
    recipe = recall_answer(_memo_dir(args), _generation_key(args, facts, places, python))
    if recipe is None:
        return None
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
    return None if built is None else (python, facts.name, built, recipe)


# -- record ------------------------------------------------------------------------------------


class GenerationRecorder:
    """What a whole generation built in a new root depends on outside that root, and its
    recipe, recorded once the apply succeeded: the lock and the host snapshot by their bytes
    (captured before the full path reads them), the bundle, and each artifact's cache entry
    (every file, by identity) and store marker (by its bytes) as the generation was built from
    them (captured once it was: a cold apply makes them)."""

    def __init__(
        self, args: argparse.Namespace, loaded: LoadedProfile, locations: Locations
    ) -> None:
        from kvenv.env.quickstate import capture_inputs

        self.args = args
        self.locations = locations
        files = [str(loaded.lock_path)]
        if loaded.snapshot_path is not None:
            files.append(str(loaded.snapshot_path))
        bundle = getattr(args, "bundle", None)
        self.trees = [str(Path(bundle).expanduser().absolute())] if bundle else []
        self.files: list[list[Any]] | None = capture_inputs(files, [], [], [])["files"]
        self.shas: list[str] | None = None

    def look_up(self, shas: list[str]) -> None:
        """The plan's artifacts (:func:`kvenv.env.apply.plan_apply`'s ``on_lookup``)."""
        self.shas = list(shas)

    def remember(
        self, recipe: dict[str, Any], python: HostPython, host: dict[str, Any] | None
    ) -> None:
        """Record ``recipe`` (nothing without the live host's identity, or unless the plan
        named its artifacts through :meth:`look_up`)."""
        from kvenv.env.quickstate import capture_inputs, remember_answer
        from kvenv.env.store import MARKER, entry_dir
        from kvenv.fetch.cache import ArtifactCache

        if self.files is None or self.shas is None or host is None:
            return
        found = _places_of(self.args, self.locations)
        if found is None:
            return
        facts, places = found
        cache = ArtifactCache(self.locations.cache)
        where = {
            "files": [path for path, _ in self.files],
            "checks": [
                ["file", str(entry_dir(self.locations.store, sha) / MARKER)] for sha in self.shas
            ],
            "trees": self.trees,
            "entries": [str(cache.entry(sha)) for sha in self.shas],
        }
        state = {**capture_inputs(**where), "files": self.files}  # the files as first read
        key = _generation_key(self.args, facts, places, python)
        remember_answer(_memo_dir(self.args), key, {"inputs": where}, state, recipe, host)


class BundleRecorder:
    """The bundle's files captured before :func:`~kvenv.fetch.bundle.open_bundle` reads them,
    and its answer (the bundle's profile file) recorded after it verified them."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kvenv.env.quickstate import capture_tree

        self.args = args
        self.where = {"tree": _bundle_key(args)["bundle"]}
        self.tree = capture_tree(self.where["tree"]) if _eligible(args) else None

    def remember(self, profile: str) -> None:
        from kvenv.env.quickstate import remember_answer
        from kvenv.errors import KvenvError

        if self.tree is None:
            return
        try:
            directory = _memo_dir(self.args)
        except KvenvError:
            return
        state = {"tree": self.tree}
        key = _bundle_key(self.args)
        remember_answer(directory, key, self.where, state, {"profile": profile})


class Recorder:
    """The root's state captured before the full path reads it, and the answer recorded
    after it decided (see :mod:`kvenv.env.quickstate`)."""

    def __init__(
        self,
        command: str,
        args: argparse.Namespace,
        loaded: LoadedProfile,
        locations: Locations,
        files: tuple[str, ...] = (),
        *,
        absent_ok: bool = False,
    ) -> None:
        from kvenv.env.manifest import MANIFEST_NAME
        from kvenv.env.quickstate import capture
        from kvenv.env.root import POINTER_NAME, owner_file

        self.command = command
        self.args = args
        self.locations = locations
        self.host: dict[str, Any] | None = None
        self.key_extra: dict[str, Any] = {}
        files = (str(owner_file(locations)), str(loaded.lock_path), *files)
        if loaded.snapshot_path is not None:
            files += (str(loaded.snapshot_path),)
        self.where: dict[str, Any] = {
            "root": str(locations.root),
            "generations": str(locations.generations),
            "pointer": str(locations.root / POINTER_NAME),
            "manifest_name": MANIFEST_NAME,
            "files": list(files),
        }
        if absent_ok:  # no root at all is a state too (a plan before the first apply)
            self.where["absent_ok"] = True
        self.state = capture(**self.where) if _eligible(args) else None

    def remember(
        self, answer: dict[str, Any], python: HostPython | None = None, *, host: bool = False
    ) -> None:
        """Record ``answer`` (apply: with the live host identity the probe left in
        :attr:`host`; nothing when the probe gave none)."""
        from kvenv.env.quickstate import remember_answer

        if self.state is None or (host and self.host is None):
            return
        found = _places_of(self.args, self.locations)
        if found is None:
            return
        facts, places = found
        key = _key(self.command, self.args, facts, places) | self.key_extra
        if python is not None:
            key["python_row"] = _python_row(python)
            key["sys_path"] = list(sys.path)
        remember_answer(_memo_dir(self.args), key, self.where, self.state, answer, self.host)


class PlanRecorder(Recorder):
    """:class:`Recorder` for ``kvenv plan``: also the ``--host`` snapshot file, and the cache
    and store entries the plan looks up, captured by :meth:`look_up` before it reads them
    (:func:`kvenv.env.apply.plan_apply`'s ``on_lookup``). Nothing is recorded unless the
    plan looked them up through it."""

    def __init__(
        self, args: argparse.Namespace, loaded: LoadedProfile, locations: Locations
    ) -> None:
        host = (str(Path(args.host).absolute()),) if args.host else ()
        super().__init__("plan", args, loaded, locations, host, absent_ok=True)
        self.key_extra = {"plan": _plan_flags(args)}
        self.looked = False

    def look_up(self, shas: list[str]) -> None:
        """Capture each artifact's cache entry (a directory or not) and store marker (by its
        bytes), as the plan is about to look them up."""
        from kvenv.env.quickstate import capture_checks
        from kvenv.env.store import MARKER, entry_dir
        from kvenv.fetch.cache import ArtifactCache

        if self.state is None:
            return
        cache = ArtifactCache(self.locations.cache)
        checks = [["dir", str(cache.entry(sha))] for sha in shas]
        checks += [["file", str(entry_dir(self.locations.store, sha) / MARKER)] for sha in shas]
        self.where["checks"] = checks
        self.state = {**self.state, "checks": capture_checks(checks)}
        self.looked = True

    def remember_plan(self, answer: dict[str, Any], python: HostPython | None) -> None:
        """Record the plan's answer (with the live host's identity unless ``--host``)."""
        if self.looked:
            self.remember(answer, python, host=python is not None)
