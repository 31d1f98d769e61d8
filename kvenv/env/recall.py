"""A warm apply into a new runtime root, recalled: the generation the full path built once, made
again from the same sealed store entries without the model (issue 13).

When ``kvenv apply`` builds a generation in a root that did not exist, what it made is the
same for every other new root given the same inputs, except for the root's path, the
generation's id and the time: the same hard links from the same store entries, the same console
scripts (the host interpreter is part of the inputs), the same RECORDs, the same manifest with
its paths rebased. :func:`recipe` records that from the full path's own results (the links
:func:`kvenv.env.store.link_layer` made, the manifest it wrote); :mod:`kvenv.env.answers` keeps
it in the memo (kind ``generation``) with everything the full path read to decide it, and hands
it to :func:`replay` for the next new root when all of that is unchanged.

:func:`replay` does what the full path does to a new root, with the full path's own functions
for each effect: claims the root (:mod:`kvenv.env.rootfiles`: the marker, the root lock, the
owner); checks every store entry against its seal (one ``stat`` per file and per directory, as
every warm apply does: :func:`kvenv.env.seal.sealed_files`; each linked file right before its
link, :func:`kvenv.env.linking.link_checked`; a broken seal is the full path's to repair);
links, writes the scripts, the RECORDs and the manifest, switches the pointer (recording the
manifest's sha256) and writes the activation scripts
(:func:`kvenv.env.shellrender.shim_texts_for`). It stops at the same kill points. Anything
unexpected before the switch (a root that appeared meanwhile, a seal, a failed link) leaves no
generation behind and returns None: the full path runs and decides, as it always did.

A recipe is made only when the rebasing is exact: every string of the manifest that holds the
old root is that root or starts with it (followed by ``/``), and the generation id appears only
as itself or under ``<root>/generations/``; the lines the apply printed hold neither.
Imports only the standard library and kvenv's plain modules (no attrs, cattrs or packaging).
"""

from __future__ import annotations

import os
from pathlib import Path

from kvenv._util import atomic, jsonio
from kvenv._util.killpoint import kill_point
from kvenv._util.threads import thread_map
from kvenv.env.linking import link_checked, with_shebang
from kvenv.env.rootfiles import (
    GENERATIONS,
    KVENV_LIB,
    MANIFEST_FILE,
    POINTER_NAME,
    PathLock,
    new_generation_id,
    now,
    unclaim_root,
    write_marker,
    write_pointer,
)
from kvenv.env.seal import SealBreak, sealed_files
from kvenv.env.shellrender import PlainActivation
from kvenv.model.places import LOCK_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

RECIPE_FORMAT = 3  # 2: kvenv-lib's links; 3: kvenv-lib's store entry (kvenv.env.kvenvlib)
_LAYOUT = ("native", "overlay", "bin")  # the manifest's dirs: made even when empty


class Built:
    """What :func:`replay` built: the generation, its manifest and the manifest's JSON."""

    __slots__ = ("generation", "manifest", "manifest_path")

    def __init__(self, generation: str, manifest_path: Path, manifest: dict[str, Any]) -> None:
        self.generation = generation
        self.manifest_path = manifest_path
        self.manifest = manifest


# -- the recipe (recorded after the full path built a generation in a new root) ----------------


def _under(path: str, base: str) -> str:
    """``path`` relative to ``base`` (ValueError when it is not inside it)."""
    path = os.path.normpath(path)
    if not path.startswith(base + "/"):
        raise ValueError(f"{path} is not under {base}")
    return path[len(base) + 1 :]


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _rebasable(manifest: dict[str, Any], root: str, generation: str, lines: Sequence[str]) -> bool:
    """Whether rebasing ``manifest`` from ``root``/``generation`` onto another is exact (see
    the module), and ``lines`` hold neither."""
    if any(root in line or generation in line for line in lines):
        return False
    dirs = manifest.get("dirs")
    if manifest.get("root") != root or not isinstance(dirs, dict):
        return False
    if dirs.get("generation") != generation:
        return False
    under = f"{root}/{GENERATIONS}/{generation}"
    for text in _strings(manifest):
        if text == generation:
            continue
        if generation in text and not (text == under or text.startswith(under + "/")):
            return False
        if root in text and not (text == root or text.startswith(root + "/")):
            return False
    return True


def recipe(
    *,
    root: str,
    generation: str,
    store: str,
    owner: tuple[str, str | None],
    layers: Iterable[Any],
    findings: Sequence[str],
    notes: Sequence[str],
    warnings: Sequence[str],
) -> dict[str, Any] | None:
    """What the full path made of the new ``root`` (``layers``: the
    :class:`kvenv.env.store.LinkedLayer` it linked), as :func:`replay` makes it again; None when
    it cannot be replayed exactly (see the module). ``findings``, ``notes`` and ``warnings``
    are the lines the apply printed besides the generation's name and paths."""
    gen = f"{root}/{GENERATIONS}/{generation}"
    try:
        with open(f"{gen}/{MANIFEST_FILE}", "rb") as stream:
            manifest = jsonio.loads_json(stream.read(), file=f"{gen}/{MANIFEST_FILE}")
        links: list[list[str]] = []
        for layer in layers:
            if layer.links is None:
                return None  # a link it could not describe (kvenv.env.linking.group_links)
            links.extend(layer.links)
        scripts: dict[str, list[Any]] = {}
        records: list[list[str]] = []
        for layer in layers:
            for source, dest in layer.scripts:
                mode = os.stat(source).st_mode & 0o7777
                scripts.setdefault(_under(dest, gen), [_under(source, store), mode])
            for record in layer.records:
                with open(record, encoding="utf-8") as stream:
                    records.append([_under(record, gen), stream.read()])
        layout = [_under(manifest["dirs"][name], gen) for name in _LAYOUT]
        kvenv_lib = manifest.get("kvenv_lib")  # the store entry it was linked from
        if kvenv_lib is None and os.path.isdir(f"{gen}/{KVENV_LIB}"):
            return None  # an older generation's links into kvenv's installation: not reused
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(manifest, dict) or not _rebasable(
        manifest, root, generation, [*findings, *notes, *warnings]
    ):
        return None
    try:  # every store entry the manifest names is checked, as the full path checks them
        named = {str(d["wheel_sha256"]) for d in manifest["distributions"]}
    except (KeyError, TypeError):
        return None
    entries = sorted(named | {sha for sha, _, _, _ in links} | {
        source.split("/", 1)[0] for source, _ in scripts.values()
    })  # fmt: skip
    return {
        "format": RECIPE_FORMAT,
        "root": root,
        "generation": generation,
        "owner": list(owner),
        "entries": entries,
        "layout": layout,
        "kvenv_lib": kvenv_lib,
        "links": links,
        "scripts": [[dest, source, mode] for dest, (source, mode) in sorted(scripts.items())],
        "records": records,
        "manifest": manifest,
        "findings": list(findings),
        "notes": list(notes),
        "warnings": list(warnings),
    }


# -- the replay ---------------------------------------------------------------------------------


def _rebased(value: Any, old: str, new: str, old_gen: str, new_gen: str) -> Any:
    """``value`` with the root ``old`` (and the generation ``old_gen`` under it) replaced."""
    if isinstance(value, str):
        if value == old_gen:
            return new_gen
        if value == old or value.startswith(old + "/"):
            value = new + value[len(old) :]
            prefix = f"{new}/{GENERATIONS}/{old_gen}"
            if value == prefix or value.startswith(prefix + "/"):
                value = f"{new}/{GENERATIONS}/{new_gen}" + value[len(prefix) :]
        return value
    if isinstance(value, dict):
        return {k: _rebased(v, old, new, old_gen, new_gen) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebased(v, old, new, old_gen, new_gen) for v in value]
    return value


def _usable(data: Any, root: str, generation: str) -> bool:
    """Whether the rebased manifest ``data`` has what this module reads of it (lists of
    strings, a dict of strings) with every runtime path inside ``root``, as
    :func:`kvenv.env.manifest.check_manifest` requires: a recipe is read like any input."""
    base = os.path.normpath(root).rstrip("/") + "/"

    def inside(paths: Any) -> bool:
        return (
            isinstance(paths, list)
            and all(
                isinstance(p, str) and os.path.isabs(p) and ".." not in p.split("/") for p in paths
            )
            and all((os.path.normpath(p) + "/").startswith(base) for p in paths)
        )

    try:
        dirs, activation = data["dirs"], data["activation"]
        env, libraries = activation.get("env", {}), activation.get("ld_library_path", [])
        imports = activation.get("pth_imports", [])
        if not (isinstance(imports, list) and isinstance(libraries, list)):
            return False
        strings = [*imports, *libraries, *env.values()]
        return bool(
            os.path.normpath(data["root"]) == os.path.normpath(root)
            and dirs["generation"] == generation
            and inside([dirs["native"], dirs["overlay"], dirs["bin"]])
            and all(inside(activation.get(k, [])) for k in ("pythonpath", "path", "site_dirs"))
            and all(isinstance(e, str) for e in strings)
            and all(os.path.isabs(e) for e in libraries)
        )
    except (KeyError, TypeError, AttributeError):
        return False


def _relative(path: object) -> str:
    """``path`` when it is a plain relative path (no ``..``, ``.``, empty or absolute part)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\x00" in path:
        raise ValueError(f"not a relative path: {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"not a plain relative path: {path!r}")
    return path


def _entry_name(sha: object) -> str:
    """A store entry's name: 64 lowercase hex digits."""
    if not isinstance(sha, str) or len(sha) != 64 or sha.strip("0123456789abcdef"):
        raise ValueError(f"not a store entry: {sha!r}")
    return sha


def _member(sha: object, known: set[str]) -> str:
    if not isinstance(sha, str) or sha not in known:
        raise ValueError(f"not an entry of the recipe: {sha!r}")
    return sha


def _group(group: Any, known: set[str]) -> tuple[str, str, str, list[str]]:
    """One group of the recipe's links (``[entry, source prefix, destination prefix, the paths
    under both, one per line]``), every path in it checked at once to be plain and relative:
    no empty, ``.`` or ``..`` part, not absolute, no NUL."""
    sha, source, dest, joined = group
    if not (isinstance(joined, str) and joined and "\x00" not in joined):
        raise ValueError("not a list of paths")
    _relative(source + "x")
    _relative(dest + "x")
    if not (source.endswith("/") and dest.endswith("/")):
        raise ValueError(f"not directory prefixes: {source!r}, {dest!r}")
    paths = "/" + joined.replace("\n", "/") + "/"
    if "//" in paths or "/./" in paths or "/../" in paths:
        raise ValueError("a path with an empty, '.' or '..' part")
    return _member(sha, known), source, dest, joined.split("\n")


def _seals(
    store: Path, entries: Sequence[str], jobs: int
) -> dict[str, dict[str, tuple[int, int, int]]] | None:
    """Each store entry's seal, checked but for its files (the seal readable, every
    directory's ctime, the names at the top), by ``jobs`` threads as ``unpack_all`` checks
    them; None when any differs: the full path verifies and repairs that entry."""
    # stat calls release the GIL
    found = thread_map(lambda sha: sealed_files(store / sha), entries, jobs, "kvenv-seal")
    seals: dict[str, dict[str, tuple[int, int, int]]] = {}
    for sha, sealed in zip(entries, found, strict=True):
        if isinstance(sealed, SealBreak):
            return None
        seals[sha] = sealed
    return seals


LinkPlan = dict[str, list[tuple[str, str, tuple[int, int, int]]]]


def _link_plan(
    store: Path,
    gen: Path,
    groups: Sequence[tuple[str, str, str, list[str]]],
    seals: Mapping[str, Mapping[str, tuple[int, int, int]]],
) -> LinkPlan | None:
    """Each directory of the generation with its hard links (source, destination, the seal
    the source must still match when it is linked: :func:`kvenv.env.linking.link_checked`).
    Every other file of an entry (a script, a RECORD written anew) is checked against its
    seal here. None when a file to link is not in its entry's seal, or another one changed."""
    by_dir: LinkPlan = {}
    base, made = str(store), str(gen)
    linked: dict[str, set[str]] = {sha: set() for sha in seals}
    for sha, source, dest, paths in groups:
        relative = list(map(source.__add__, paths))  # per file in C where it can be
        try:
            expected = list(map(seals[sha].__getitem__, relative))
        except KeyError:
            return None  # a file to link that its entry's seal does not hold
        linked[sha].update(relative)
        sources = map(f"{base}/{sha}/{source}".__add__, paths)
        dests = list(map(f"{made}/{dest}".__add__, paths))
        for item in zip(sources, dests, expected, strict=True):
            full = item[1]
            by_dir.setdefault(full[: full.rindex("/")], []).append(item)
    for sha, files in seals.items():
        for rel in files.keys() - linked[sha]:  # the entry's files not linked
            size, mode, mtime = files[rel]
            try:
                info = os.lstat(f"{base}/{sha}/{rel}")
            except OSError:
                return None
            if (info.st_size, info.st_mode & 0o7777, info.st_mtime_ns) != (size, mode, mtime):
                return None
    return by_dir


def replay(
    recipe: Mapping[str, Any],
    root: Path,
    store: Path,
    *,
    python: str,
    jobs: int,
    wait: bool,
    on_wait: Callable[[str], None],
) -> Built | None:
    """Build ``recipe``'s generation in the new ``root`` from ``store`` (console scripts for
    ``python``) and make it current; None, with no generation left behind, when anything is
    not as recorded (then the full path runs; a root this made stays claimed and owned by the
    same profile, which the full path accepts)."""
    try:  # a recipe is kvenv's own record, read like any input: its paths are checked
        if recipe["format"] != RECIPE_FORMAT:
            return None
        old_root, old_gen = str(recipe["root"]), str(recipe["generation"])
        name, file = recipe["owner"]
        owner = (str(name), None if file is None else str(file))
        entries = [_entry_name(sha) for sha in recipe["entries"]]
        known = set(entries)
        layout = [_relative(d) for d in recipe["layout"]]
        lib = recipe["kvenv_lib"]
        kvenv_lib = None if lib is None else _entry_name(lib)
        groups = [_group(group, known) for group in recipe["links"]]
        scripts = [(_relative(d), _relative(s), int(m) & 0o7777) for d, s, m in recipe["scripts"]]
        for _, source, _ in scripts:
            _member(source.split("/", 1)[0], known)
        records = [(_relative(dest), str(text)) for dest, text in recipe["records"]]
        manifest = dict(recipe["manifest"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    seals = _seals(store, entries, jobs)
    if seals is None:
        return None  # a changed store entry: the full path verifies and repairs it
    generation = new_generation_id()
    gen = root / GENERATIONS / generation
    by_dir = _link_plan(store, gen, groups, seals)
    if by_dir is None:
        return None  # a file to link that its entry's seal does not hold, or changed
    rebased = _rebased(manifest, old_root, str(root), old_gen, generation)
    if not _usable(rebased, str(root), generation):
        return None  # not a manifest the full reader accepts for this root
    try:
        root.mkdir(parents=True)  # not exist_ok: a root that appeared meanwhile is the full path's
    except OSError:
        return None
    try:
        write_marker(root, None, None)  # claimed (kvenv.env.root.claim_root)
    except FileExistsError:
        return None  # another apply claimed the root meanwhile: the full path, under its lock
    except OSError:
        unclaim_root(root, remove_dir=True)
        return None
    try:
        with PathLock(root / LOCK_NAME, root / (LOCK_NAME + ".owner"), wait=wait, on_wait=on_wait):
            if (root / POINTER_NAME).exists() or (root / GENERATIONS).exists():
                return None  # another apply got here first (its owner stays): the full path
            write_marker(root, owner, _created_at(root))  # owned (kvenv.env.root.take_ownership)
            try:
                return _build(
                    root, gen, generation, store, python, jobs, layout, by_dir, scripts,
                    records, rebased, kvenv_lib,
                )  # fmt: skip
            except BaseException as exc:
                if not (root / POINTER_NAME).exists():  # never current: nothing to keep
                    import shutil

                    shutil.rmtree(gen, ignore_errors=True)
                    unclaim_root(root, remove_dir=True)  # the root this made, given up
                if isinstance(exc, _Unsealed):
                    return None
                raise
    except OSError:
        unclaim_root(root, remove_dir=True)  # unless something was applied there
        return None  # the full path meets the same error and reports it


class _Unsealed(Exception):
    """A file to link changed since its entry's seal was checked, or could not be linked."""


def _created_at(root: Path) -> str | None:
    from kvenv.model.places import ROOT_MARKER

    try:
        with open(root / ROOT_MARKER, "rb") as stream:
            value = jsonio.loads_json(stream.read(), file=f"{root}/{ROOT_MARKER}").get("created_at")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _build(
    root: Path,
    gen: Path,
    generation: str,
    store: Path,
    python: str,
    jobs: int,
    layout: Sequence[str],
    by_dir: LinkPlan,
    scripts: Sequence[tuple[str, str, int]],
    records: Sequence[tuple[str, str]],
    manifest: dict[str, Any],
    kvenv_lib: str | None,
) -> Built:
    from kvenv.env.shellrender import path_with_interpreter, shim_texts_for

    gen.mkdir(parents=True)
    kill_point("fetch")  # the full path's points, in its order (nothing to fetch or verify here)
    kill_point("verify")
    for directory in layout:
        (gen / directory).mkdir(parents=True, exist_ok=True)
    if kvenv_lib is not None:  # linked from its sealed store entry, as the full path does
        from kvenv.env.kvenvlib import link_lib
        from kvenv.env.seal import seal_problem

        if seal_problem(store / kvenv_lib) is not None:
            raise _Unsealed  # the full path makes the entry again
        try:
            link_lib(store, kvenv_lib, gen)
        except OSError:
            raise _Unsealed from None
    if link_checked(by_dir, jobs=jobs) is not None:
        raise _Unsealed  # changed since the check above, or not linkable: the full path's
    kill_point("install-native")
    # Written as new files only ("x"): never through an existing name, which could be a hard
    # link into the store (the full path writes these where nothing was linked).
    for dest, source, mode in scripts:
        path = gen / dest
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(store / source, "rb") as stream:
            content = with_shebang(stream.read(), python)
        with open(path, "xb") as out:
            out.write(content)
        os.chmod(path, mode)
    for dest, text in records:
        with open(gen / dest, "x", encoding="utf-8") as out:
            out.write(text)
    kill_point("install-overlay")
    manifest["created_at"] = now()
    manifest_path = gen / MANIFEST_FILE
    atomic.write_json(manifest_path, manifest)
    kill_point("write-manifest")
    write_pointer(root, generation, None)
    kill_point("switch")
    activation = PlainActivation(manifest["activation"])
    activation.path = path_with_interpreter(activation.path, manifest.get("python"))
    for path, text in shim_texts_for(root, generation, activation).items():
        atomic.write_text(path, text, durable=False)
    kill_point("write-shims")
    return Built(generation, manifest_path, manifest)
