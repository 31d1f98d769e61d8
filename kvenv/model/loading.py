"""Finding, reading, merging (``extends``) and checking profiles, and reading the host snapshot
a profile records.

Discovery order for a reference that is not a path: ``./profiles/NAME.toml``, each directory
in ``$KVENV_PROFILE_PATH``, then the built-ins shipped with kvenv.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvenv._util import memo, tomlio
from kvenv._util.resources import data_dir
from kvenv.errors import InputError, Problem, ProfileError, ProfileNotReadable
from kvenv.model import convert
from kvenv.model.fields import foreign_character
from kvenv.model.places import DEFAULT_PROFILE, ENV_DEFAULT, ENV_PATH
from kvenv.model.profile import (
    HfSource,
    IndexSource,
    PathSource,
    Profile,
    cpu_problems,
    runtime_env_problems,
)

if TYPE_CHECKING:
    from kvenv.model.snapshot import HostSnapshot

SCHEMA_LINE = "#:schema ../schemas/profile.schema.json"


@attrs.frozen
class LoadedProfile:
    """A profile after ``extends``, with where it came from."""

    profile: Profile
    path: Path
    origin: str  # "builtin", "project", "path", "KVENV_PROFILE_PATH"
    chain: tuple[Path, ...]  # the file itself first, then its parents
    # (value, project dir) of relative paths a parent set: they stay relative to that parent
    inherited_paths: tuple[tuple[str, Path], ...] = ()
    # the memo dependencies the loader noted (kvenv._util.memo's seam): the bytes of each file
    # of ``chain`` as parsed, each directory a name was looked up in (empty: not loaded)
    reads: tuple[list[Any], ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def base_dir(self) -> Path:
        """The project directory that relative paths in the profile are resolved against:
        the parent of a ``profiles/`` directory, else the profile's own directory."""
        return project_dir_of(self.path)

    def resolve(self, relpath: str) -> Path:
        """A relative path of the profile, against the project of the file that set it."""
        for value, base in self.inherited_paths:
            if value == relpath:
                return base / relpath
        return self.base_dir / relpath

    @property
    def lock_path(self) -> Path:
        return self.resolve(self.profile.lock_relpath)

    @property
    def snapshot_path(self) -> Path | None:
        snap = self.profile.host.snapshot
        return self.resolve(snap) if snap else None

    @property
    def host_python_path(self) -> Path | None:
        """The profile's ``[host] python``: absolute as written, a relative path against the
        profile's project (like ``snapshot``); None when the profile names none."""
        python = self.profile.host.python
        if python is None:
            return None
        return Path(python) if Path(python).is_absolute() else self.resolve(python)

    @property
    def digest(self) -> str:
        return profile_digest(self.profile)


def project_dir_of(path: Path) -> Path:
    parent = path.parent
    return parent.parent if parent.name == "profiles" else parent


def builtin_dir() -> Path:
    return data_dir("profiles")


def _search_dirs(cwd: Path) -> Iterator[tuple[str, Path]]:
    yield "project", cwd / "profiles"
    for entry in os.environ.get(ENV_PATH, "").split(os.pathsep):
        if entry:
            yield ENV_PATH, Path(entry).expanduser()
    yield "builtin", builtin_dir()


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref


def find_profile(ref: str, *, cwd: Path | None = None) -> tuple[Path, str]:
    """Locate a profile by path or name; raise :class:`ProfileError` naming where it looked."""
    here = cwd or Path.cwd()
    if _looks_like_path(ref):
        path = here / Path(ref).expanduser()
        if not path.is_file():
            raise ProfileNotReadable(
                f"profile file not found: {ref}",
                hint="give an existing .toml file, or a profile name (see `kvenv profiles`)",
            )
        return path, "path"
    if not _is_name(ref):
        foreign = foreign_character(ref)
        raise ProfileNotReadable(
            f"not a profile name or .toml path: {ref!r}"
            + (f" ({foreign}: a look-alike?)" if foreign else ""),
            hint="a name is lowercase letters, digits, '.', '_' and '-'; a path ends in .toml",
        )
    looked: dict[str, list[str]] = {}  # directory -> what it is (said in the error)
    labels = {"project": "the project's", ENV_PATH: f"${ENV_PATH}", "builtin": "the built-ins"}
    for origin, directory in _search_dirs(here):
        candidate = directory / f"{ref}.toml"
        looked.setdefault(str(directory), []).append(labels.get(origin, origin))
        memo.note("stat", str(directory))  # a profile added here would shadow a later one
        if candidate.is_file():
            return candidate, origin
        if os.path.lexists(candidate):  # never passed over for a later directory's profile
            what = (
                f"a link to {os.readlink(candidate)}, which is not a file"
                if candidate.is_symlink()
                else "not a file"
            )
            raise ProfileNotReadable(
                f"profile {candidate} is {what}",
                hint="point it at a profile file, or remove it to use a later one in: "
                + ", ".join(str(d) for _, d in _search_dirs(here)),
            )
    import difflib

    names = sorted({name for name, _, _ in iter_profiles(cwd=here)})
    close = difflib.get_close_matches(ref, names, n=1, cutoff=0.6) or [
        n for n in names if difflib.SequenceMatcher(None, ref, n[: len(ref)]).ratio() >= 0.8
    ]
    raise ProfileNotReadable(
        f"no profile named {ref!r}",
        hint=(f"did you mean {close[0]!r}? " if close else "")
        + "looked in "
        + ", ".join(f"{d} ({', '.join(dict.fromkeys(w))})" for d, w in looked.items())
        + "; `kvenv profiles` lists them",
    )


def _is_name(ref: str) -> bool:
    from kvenv.model.fields import ProfileName, check

    return check(ProfileName, ref) is None


def default_profile_ref() -> str:
    return os.environ.get(ENV_DEFAULT) or DEFAULT_PROFILE


def iter_profiles(*, cwd: Path | None = None) -> Iterator[tuple[str, str, Path]]:
    """Every discoverable profile as (name, origin, path); earlier origins shadow later."""
    seen: set[str] = set()
    for origin, directory in _search_dirs(cwd or Path.cwd()):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            if path.stem not in seen and _is_name(path.stem):
                seen.add(path.stem)
                yield path.stem, origin, path


def iter_misnamed(*, cwd: Path | None = None) -> Iterator[tuple[str, str, Path, str]]:
    """Every ``*.toml`` file in a profile directory (not the built-ins) whose name cannot name
    a profile, as (stem, origin, path, why): ``profiles/Demo.toml`` or one with a look-alike
    letter is never found by its name, and ``kvenv profiles`` says so."""
    for origin, directory in _search_dirs(cwd or Path.cwd()):
        if origin == "builtin" or not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            if not _is_name(path.stem):
                foreign = foreign_character(path.stem)
                why = f"{path.stem!r} is not a profile name" + (
                    f" ({foreign}: a look-alike?)"
                    if foreign
                    else " (lowercase letters, digits, '.', '_' and '-')"
                )
                yield path.stem, origin, path, why


def _read_raw(path: Path) -> dict[str, Any]:
    from kvenv.model.fields import MAX_PROFILE_BYTES

    try:
        raw = tomlio.read(path, max_bytes=MAX_PROFILE_BYTES, what="profile")
    except InputError as exc:
        raise exc.recast(ProfileNotReadable) from None
    problems = list(_overlong(raw, "$", str(path)))
    if problems:
        raise ProfileError(f"invalid profile: {path}", problems=problems)
    return raw


def _overlong(node: Any, where: str, file: str) -> Iterator[Problem]:
    """Every text (key or value) of a raw profile longer than ``MAX_TEXT_CHARS``."""
    from kvenv.model.fields import MAX_TEXT_CHARS

    fix = f"shorten it to at most {MAX_TEXT_CHARS} characters"
    if isinstance(node, str) and len(node) > MAX_TEXT_CHARS:
        message = f"text of {len(node)} characters is too long (at most {MAX_TEXT_CHARS})"
        yield Problem(message, file=file, path=where, fix=fix)
    elif isinstance(node, dict):
        for key, value in node.items():
            if len(key) > MAX_TEXT_CHARS:
                message = f"a key of {len(key)} characters is too long (at most {MAX_TEXT_CHARS})"
                yield Problem(message, file=file, path=where, fix=fix)
                continue
            yield from _overlong(value, f"{where}.{key}", file)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _overlong(value, f"{where}[{index}]", file)


def _merge_layer(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` (a child) merged onto ``base`` (its parents) key by key, except that a
    ``[native.source]`` of another ``kind`` than the parent's replaces it whole: a source is
    one thing, and the parent's keys of another kind (an ``hf`` repo under a ``path``) would
    only be unknown keys."""
    merged = _merge(base, over)
    own, old = _source_of(over), _source_of(base)
    if own is not None and old is not None and own.get("kind", "hf") != old.get("kind", "hf"):
        merged["native"]["source"] = dict(own)
    return merged


def _source_of(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    native = data.get("native")
    source = native.get("source") if isinstance(native, Mapping) else None
    return source if isinstance(source, Mapping) else None


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _owner(path: str, chain: list[tuple[Path, dict[str, Any]]]) -> Path:
    """The file of the chain (child first) that set the value at ``$.a.b[2]``."""
    keys = [k for k in path.replace("[", ".").replace("]", "").split(".")[1:] if k]
    for file, raw in chain:
        node: Any = raw
        found = True
        for key in keys:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif (
                isinstance(node, list) and key.isascii() and key.isdigit() and int(key) < len(node)
            ):
                node = node[int(key)]
            else:
                found = False
                break
        if found:
            return file
    return chain[0][0]


def load_profile(ref: str | None = None, *, cwd: Path | None = None) -> LoadedProfile:
    """Find, read, merge and check a profile. Every problem is reported at once."""
    here = cwd or Path.cwd()
    with memo.recording() as reads:
        path, origin, chain = _read_chain(ref, here)
    merged: dict[str, Any] = {}
    for _, raw in reversed(chain):
        merged = _merge_layer(merged, raw)
    for keys in _NOT_INHERITED:
        _keep_own(merged, chain[0][1], keys)
    origins = _merge_declared(merged, chain)
    try:
        profile = convert.structure(merged, Profile, file=str(path), what="profile")
    except InputError as exc:
        problems = [
            _declared_owner(p, origins) or p.replace(file=str(_owner(p.path or "$", chain)))
            for p in exc.problems
        ]
        raise ProfileError(f"invalid profile: {path}", problems=problems) from None
    problems = [_declared_owner(p, origins) or p for p in check_profile(profile, file=str(path))]
    if problems:
        raise ProfileError(f"invalid profile: {path}", problems=problems)
    inherited = tuple(_inherited_paths(profile, chain))
    return LoadedProfile(
        profile, path, origin, tuple(p for p, _ in chain), inherited, reads=tuple(reads.deps)
    )


def _read_chain(ref: str | None, here: Path) -> tuple[Path, str, list[tuple[Path, dict[str, Any]]]]:
    """The profile ``ref`` names (path, origin) and its ``extends`` chain, child first: each
    file with its raw document."""
    path, origin = find_profile(ref or default_profile_ref(), cwd=here)
    chain: list[tuple[Path, dict[str, Any]]] = []
    current: Path | None = path
    while current is not None:
        resolved = current.resolve()
        if any(resolved == p.resolve() for p, _ in chain):
            names = " -> ".join(str(p) for p, _ in chain) + f" -> {current}"
            raise ProfileError(
                f"profile extends itself in a cycle: {names}",
                problems=[Problem("cycle in extends", file=str(chain[-1][0]), path="$.extends")],
                hint="remove one of the extends links",
            )
        raw = _read_raw(current)
        if not raw:
            raise _empty_profile(current, here)
        chain.append((current, raw))
        parent = raw.get("extends")
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent:
            raise ProfileError(
                f"invalid profile: {current}",
                problems=[
                    Problem(
                        "extends must be a profile name or a .toml path",
                        file=str(current),
                        path="$.extends",
                    )
                ],
            )
        else:
            current = _find_parent(parent, current, here)
    return path, origin, chain


def _inherited_paths(
    profile: Profile, chain: list[tuple[Path, dict[str, Any]]]
) -> Iterator[tuple[str, Path]]:
    values = {"$.host.snapshot": profile.host.snapshot, "$.host.python": profile.host.python}
    if profile.native is not None and isinstance(profile.native.source, PathSource):
        values["$.native.source.path"] = profile.native.source.path
    for field, value in values.items():
        owner = _owner(field, chain)
        if value is not None and owner != chain[0][0]:
            yield value, project_dir_of(owner)


# The lists of ``[overlay]`` that ``extends`` merges entry by entry (docs/profiles.md): the
# parent's entries, then the child's; a child's entry for a name a parent lists replaces it.
DECLARED = ("requires", "constraints")
_DECLARED_AT = re.compile(r"^\$\.overlay\.(requires|constraints)\[(\d+)\]")
_REQ_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(text: str) -> str | None:
    """The canonical distribution name a PEP 508 line starts with (None: it names none)."""
    found = _REQ_NAME.match(text)
    return canonicalize_name(found.group(1)) if found else None


def _merge_declared(
    merged: dict[str, Any], chain: list[tuple[Path, dict[str, Any]]]
) -> dict[tuple[str, int], tuple[Path, int]]:
    """Merge ``[overlay] requires`` and ``constraints`` along ``chain`` (child first) into
    ``merged``: where each merged entry came from, ``(key, index) -> (file, its index)``."""
    origins: dict[tuple[str, int], tuple[Path, int]] = {}
    overlay = merged.get("overlay")
    if not isinstance(overlay, dict):
        return origins
    for key in DECLARED:
        own = [raw.get("overlay", {}).get(key) for _, raw in chain]
        owned = [o for o in own if o is not None]
        if len(owned) < 2 or not all(
            isinstance(o, list) for o in owned
        ):  # one file sets it (or one is not a list: conversion says so)
            for file, raw in chain:
                if isinstance(raw.get("overlay", {}).get(key), list):
                    origins.update({(key, i): (file, i) for i in range(len(raw["overlay"][key]))})
                    break
            continue
        entries: list[tuple[Any, Path, int]] = []
        for file, raw in reversed(chain):
            for index, value in enumerate(raw.get("overlay", {}).get(key) or []):
                name = requirement_name(value) if isinstance(value, str) else None
                same = next(
                    (
                        at
                        for at, (old, old_file, _) in enumerate(entries)
                        if old_file != file
                        and isinstance(old, str)
                        and name is not None
                        and requirement_name(old) == name
                    ),
                    None,
                )
                if same is None:
                    entries.append((value, file, index))
                else:
                    entries[same] = (value, file, index)
        overlay[key] = [value for value, _, _ in entries]
        origins.update({(key, at): (file, i) for at, (_, file, i) in enumerate(entries)})
    return origins


def _declared_owner(
    problem: Problem, origins: dict[tuple[str, int], tuple[Path, int]]
) -> Problem | None:
    """``problem`` about a merged ``[overlay]`` list entry, re-aimed at the file and index that
    wrote it; None for any other problem."""
    found = _DECLARED_AT.match(problem.path or "")
    if found is None:
        return None
    origin = origins.get((found.group(1), int(found.group(2))))
    if origin is None:
        return None
    file, index = origin
    rest = (problem.path or "")[found.end() :]
    return problem.replace(file=str(file), path=f"$.overlay.{found.group(1)}[{index}]{rest}")


def _keep_own(merged: dict[str, Any], own: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Set ``merged[keys]`` to the child's own value, or remove it when the child has none."""
    node: Any = own
    for key in keys:
        node = node.get(key, _ABSENT) if isinstance(node, Mapping) else _ABSENT
    target: Any = merged
    for key in keys[:-1]:
        target = target.get(key) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        return
    if node is _ABSENT:
        target.pop(keys[-1], None)
    else:
        target[keys[-1]] = node


_ABSENT = object()


# Each file names itself and its parent; a lock records one profile's digest, so a child
# gets its own lock (``locks/pylock.NAME.toml`` unless it sets ``overlay.lock``).
_NOT_INHERITED: tuple[tuple[str, ...], ...] = (("name",), ("extends",), ("overlay", "lock"))


def _find_parent(parent: str, child: Path, cwd: Path) -> Path:
    """A parent named by path is relative to the child's file. A parent named by name is looked
    up next to the child first, then in the discovery order; the child itself is skipped, so a
    project profile may extend the built-in profile of the same name."""
    itself = False
    if _looks_like_path(parent):
        candidate = child.parent / Path(parent).expanduser()
        itself = candidate.is_file() and _same_file(candidate, child)
        if candidate.is_file() and not itself:
            return candidate
        fix = f"no file {candidate}; give a .toml path relative to {child.parent}"
    elif _is_name(parent):
        directories = [child.parent, *(d for _, d in _search_dirs(cwd))]
        for directory in directories:
            candidate = directory / f"{parent}.toml"
            memo.note("stat", str(directory))
            if candidate.is_file() and not _same_file(candidate, child):
                return candidate
            itself = itself or (candidate.is_file() and _same_file(candidate, child))
        fix = "looked in " + ", ".join(dict.fromkeys(str(d) for d in directories))
    else:
        foreign = foreign_character(parent)
        fix = (f"{foreign}; " if foreign else "") + (
            "give a profile name (lowercase letters, digits, '.', '_', '-') or a .toml path"
        )
    if itself:
        raise ProfileError(
            f"invalid profile: {child}",
            problems=[
                Problem(
                    f"the profile extends itself: {parent!r} is this very file",
                    file=str(child),
                    path="$.extends",
                    fix="extend another profile (`kvenv profiles` lists them; a project file "
                    "may extend the built-in of its own name), or remove `extends`",
                )
            ],
        )
    raise ProfileError(
        f"invalid profile: {child}",
        problems=[
            Problem(
                f"parent profile {parent!r} not found",
                file=str(child),
                path="$.extends",
                fix=fix,
            )
        ],
    )


def _empty_profile(path: Path, cwd: Path) -> ProfileError:
    """The error for a profile file that holds nothing (no key at all), naming the profile of
    the same name it shadows, if any: ``kvenv show demo --toml > profiles/demo.toml`` leaves
    such a file, since the shell creates it before kvenv runs."""
    shadowed = next(
        (
            (origin, candidate)
            for origin, directory in _search_dirs(cwd)
            for candidate in [directory / path.name]
            if candidate.is_file() and not _same_file(candidate, path)
        ),
        None,
    )
    if shadowed is None:
        return ProfileError(
            f"empty profile: {path}",
            problems=[
                Problem(
                    "the file is empty (no `schema`, no `name`)",
                    file=str(path),
                    path="$",
                    fix="fill it (`kvenv show demo --toml` prints a complete one), or delete it",
                )
            ],
        )
    origin, other = shadowed
    what = "built-in" if origin == "builtin" else f"{origin} ({other})"
    return ProfileError(
        f"empty profile: {path} shadows the {what} profile {path.stem!r}",
        problems=[
            Problem(
                f"the file is empty, and being found first it hides the {what} profile "
                f"{path.stem!r}",
                file=str(path),
                path="$",
                fix=f"delete {path} to use the {what} one, or fill it: write the copy to "
                f"another file first (`kvenv show {path.stem} --toml > {path.stem}.new.toml`, "
                f"then move it over {path}; `> {path}` empties the file before kvenv reads it)",
            )
        ],
    )


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def canonicalize_name(name: str) -> str:
    """PEP 503 normalisation, as ``packaging.utils.canonicalize_name`` (written here because
    importing ``packaging.utils`` pulls in ``packaging.tags`` and costs CLI startup time)."""
    return _SEPARATORS.sub("-", name).lower()


_SEPARATORS = re.compile(r"[-_.]+")


def check_profile(profile: Profile, *, file: str | None = None) -> list[Problem]:
    """Checks that span fields (each field alone was checked while structuring)."""
    problems: list[Problem] = []

    def add(path: str, message: str, fix: str | None = None) -> None:
        problems.append(Problem(message, file=file, path=path, fix=fix))

    protected = [canonicalize_name(n) for n in profile.host.protected]
    for index, name in enumerate(protected):
        if name in protected[:index]:
            add(f"$.host.protected[{index}]", f"{name!r} is listed twice", "list each name once")
    waived = [canonicalize_name(w.name) for w in profile.host.waivers]
    for index, name in enumerate(waived):
        if name in waived[:index]:
            add(f"$.host.waivers[{index}].name", f"{name!r} is waived twice", "waive it once")
    record_waived = [canonicalize_name(w.name) for w in profile.overlay.record_waivers]
    for index, name in enumerate(record_waived):
        where = f"$.overlay.record_waivers[{index}].name"
        if name in record_waived[:index]:
            add(where, f"{name!r} is waived twice", "waive it once")
        elif name in protected:
            add(where, f"{name!r} is protected on the host and never installed", "remove it")
    native_name = canonicalize_name(profile.native.name) if profile.native else None
    for key in DECLARED:
        declared: list[str | None] = []
        for index, text in enumerate(getattr(profile.overlay, key)):
            where, named = f"$.overlay.{key}[{index}]", requirement_name(text)
            declared.append(named)
            if named is None:
                continue
            if named in protected and key == "requires":
                add(
                    where,
                    f"{named!r} is protected on the host and never installed",
                    f"remove it (the host provides {named}): `kvenv remove {named}`",
                )
            elif named == native_name:
                add(where, f"{named!r} is the native wheel", "pin it in [native], not here")
            elif named in declared[:index] and key == "requires":
                add(where, f"{named!r} is required twice", "write one requirement per name")
    pth_allowed = [canonicalize_name(w.name) for w in profile.overlay.allow_pth]
    for index, name in enumerate(pth_allowed):
        if name in pth_allowed[:index]:
            add(f"$.overlay.allow_pth[{index}].name", f"{name!r} is allowed twice", "list it once")
    target = profile.target
    if target is not None and target.implementation == "cpython" and not target.pure:
        want = "cp" + target.python_version.replace(".", "")
        if target.abi != want and not target.abi.startswith(want):
            add(
                "$.target.abi",
                f"ABI {target.abi!r} does not match Python {target.python}",
                f"use {want!r} (or 'none' for a pure-Python target)",
            )
    if target is not None and target.gpu is not None:
        tp = profile.runtime.tensor_parallel_size
        if tp is not None and tp > target.gpu.count:
            add(
                "$.runtime.tensor_parallel_size",
                f"tensor_parallel_size {tp} exceeds the target's {target.gpu.count} GPU(s)",
                f"use at most {target.gpu.count}",
            )
    if target is not None and target.cpu is not None:
        for where, message, fix in cpu_problems(target):
            add(where, message, fix)
    for where, message, fix in runtime_env_problems(profile.runtime):
        add(where, message, fix)
    native = profile.native
    if native is not None:
        if canonicalize_name(native.name) in protected:
            add("$.native.name", f"{native.name!r} is protected on the host", "pick another")
        libs = native.provided_libs or []
        for index, lib in enumerate(libs):
            where = f"$.native.provided_libs[{index}]"
            if "/" in lib or lib.strip() != lib:
                add(where, f"{lib!r} is not a library file name", 'write a name: "libnuma.so.1"')
            elif lib in libs[:index]:
                add(where, f"{lib!r} is listed twice", "list each library once")
        filename = None
        if isinstance(native.source, (HfSource, IndexSource)):
            filename = native.source.filename
        if filename:
            problems.extend(_check_filename(native.name, native.version, filename, file))
    return problems


def _check_filename(name: str, version: str, filename: str, file: str | None) -> list[Problem]:
    """The wheel file name (``{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl``)
    names the same distribution and version as ``native``."""
    from packaging.version import InvalidVersion, Version

    def problem(message: str, fix: str) -> Problem:
        return Problem(message, file=file, path="$.native.source.filename", fix=fix)

    parts = filename[: -len(".whl")].split("-")
    wheel_version: Version | None = None
    if len(parts) in (5, 6) and all(parts):
        try:
            wheel_version = Version(parts[1])
        except InvalidVersion:
            wheel_version = None
    if wheel_version is None:
        return [
            problem(
                f"{filename!r} is not a valid wheel file name",
                "use NAME-VERSION-PYTHON-ABI-PLATFORM.whl, as the wheel was built",
            )
        ]
    problems = []
    wheel_name = canonicalize_name(parts[0])
    if wheel_name != canonicalize_name(name):
        problems.append(
            problem(
                f"the wheel is for {wheel_name!r}, not {name!r}", "make native.name match the wheel"
            )
        )
    if wheel_version != Version(version):
        problems.append(
            problem(
                f"the wheel's version {wheel_version} differs from native.version {version}",
                "make native.version match the wheel",
            )
        )
    return problems


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    data: dict[str, Any] = convert.unstructure(profile)
    return data


def dump_profile(profile: Profile, *, schema_line: str | None = SCHEMA_LINE) -> str:
    text = tomlio.dumps(profile_to_dict(profile))
    return f"{schema_line}\n{text}" if schema_line else text


def profile_digest(profile: Profile) -> str:
    """``sha256:`` of the profile's canonical JSON (after ``extends``), recorded in locks."""
    import hashlib
    import json

    data = profile_to_dict(profile)
    if not data.get("overlay", {}).get("record_waivers", True):
        # Without record waivers the field is left out of the hash: a profile that sets none
        # has the digest its locks record whether or not they know the field.
        del data["overlay"]["record_waivers"]
    if not data.get("overlay", {}).get("allow_pth", True):
        del data["overlay"]["allow_pth"]  # none allowed: the digest locks already record
    for key in DECLARED:  # none declared: the digest locks made before the field record
        if not data.get("overlay", {}).get(key, True):
            del data["overlay"][key]
    # Where the host interpreter lives is not what is locked or installed: moving it keeps the
    # lock valid (apply rebuilds when the interpreter differs from the manifest's).
    data.get("host", {}).pop("python", None)
    if not data.get("runtime", {}).get("allow_env", True):
        del data["runtime"]["allow_env"]  # none allowed: the digest locks already record
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@attrs.frozen
class RecordedHost:
    """The host snapshot a profile records (``[host] snapshot``), read, or why there is none."""

    snapshot: HostSnapshot | None
    missing: str | None = None  # why ``snapshot`` is None, in a sentence


def recorded_host(loaded: LoadedProfile, *, must_exist: bool = False) -> RecordedHost:
    """Read the host snapshot the profile names. None, with the reason, when it names none or
    (unless ``must_exist``) when its file does not exist; a file that cannot be read as a
    snapshot raises :class:`InputError`."""
    from kvenv.model.snapshot import read_snapshot  # packaging.utils: not at CLI startup

    path = loaded.snapshot_path
    if path is None:
        return RecordedHost(None, "the profile names no host snapshot")
    if not must_exist and not path.exists():
        memo.note("bytes", str(path), None)  # the recording seam: absent
        return RecordedHost(None, f"the profile's host snapshot {path} does not exist")
    return RecordedHost(read_snapshot(path))
