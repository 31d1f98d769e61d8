"""Two ways to build a generation from a warm store, measured against each other (issue 13):

- **links** (what kvenv does): every file of every wheel hard-linked into the generation, every
  directory made: O(files) system calls (``kvenv.env.store.link_layer``);
- **symlinks** (the O(packages) layout the issue names): each top-level directory of ``site``
  that exactly one wheel provides is one symbolic link to the store entry's directory; the
  rest (top-level files, shared top-level directories, a dist-info whose RECORD is rewritten,
  ``bin``/``data``/``include``) hard-linked as before.

For each layout: the time to build it (wall, user, sys; fresh directories, alternating rounds)
and the time to import every top-level module of the closure from it in a fresh interpreter
(``python -S``, the generation's ``site`` first on ``sys.path``), with the bytecode cache as
each layout can have it: the hard-linked generation keeps ``__pycache__`` in its own
directories; a symlinked directory is the store's (sealed, read-only), so its bytecode either
goes to ``PYTHONPYCACHEPREFIX`` (a folder of the generation: ``symlinks+prefix``) or, where
nothing sets that, cannot be written at all (``symlinks, no cache``: every start compiles;
as root it would be written into the store entry, breaking its seal).

    python benchmarks/generation_layout.py --store CACHE/store [--python PY] [--rounds 7]
        [--no-imports] [--out benchmarks/results/generation-layout.json]

The store is only read (nothing is written into it: bytecode goes to the generation or
nowhere).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_facts, write_results

from kvenv.env.store import GenerationLayout, StoreEntry, link_layer, lookup

_IMPORT_ALL = """
import sys, time, importlib
sys.path.insert(0, sys.argv[1])
names = sys.argv[2].split(",")
ok = []
start, cpu = time.perf_counter(), time.process_time()
for name in names:
    try:
        importlib.import_module(name)
        ok.append(name)
    except BaseException:
        pass
print(time.perf_counter() - start, time.process_time() - cpu, ",".join(ok))
"""


def _entries(store: Path) -> list[StoreEntry]:
    found = [lookup(store, p.name) for p in sorted(store.iterdir()) if len(p.name) == 64]
    return sorted((e for e in found if e is not None), key=lambda e: e.dist.name.lower())


def build_symlinks(entries: list[StoreEntry], layout: GenerationLayout, python: str) -> None:
    """The O(packages) layout: one symlink per top-level directory only one wheel provides."""
    owners: dict[str, set[str]] = {}
    for entry in entries:
        for path in entry.dist.files:
            first, sep, _ = path.partition("/")
            if sep and not path.startswith("../"):
                owners.setdefault(first, set()).add(entry.sha256)
    per_file: list[StoreEntry] = []
    site = os.fspath(layout.site)
    for entry in entries:
        rewritten = f"{entry.dist.dist_info}" if entry.dist.scripts else None
        kept: list[str] = []
        linked: set[str] = set()
        for path in entry.dist.files:
            first, sep, _ = path.partition("/")
            unique = sep and not path.startswith("../") and len(owners[first]) == 1
            if unique and first != rewritten:
                if first not in linked:
                    os.symlink(f"{entry.path}/site/{first}", f"{site}/{first}")
                    linked.add(first)
                continue
            kept.append(path)
        per_file.append(StoreEntry(entry.sha256, entry.path, _with_files(entry, tuple(kept))))
    link_layer(
        per_file,
        layout,
        python=python,
        allow_pth=[e.dist.name for e in entries],
        record_waivers=[e.dist.name for e in entries],
    )


def _with_files(entry: StoreEntry, files: tuple[str, ...]):  # type: ignore[no-untyped-def]
    import attrs

    return attrs.evolve(entry.dist, files=files)


def _timed_build(kind: str, entries: list[StoreEntry], gen: Path, python: str) -> dict[str, float]:
    for name in ("site", "bin"):
        (gen / name).mkdir(parents=True)
    layout = GenerationLayout.beside(gen / "site")
    before, start = os.times(), time.perf_counter()
    if kind == "links":
        link_layer(
            entries,
            layout,
            python=python,
            allow_pth=[e.dist.name for e in entries],
            record_waivers=[e.dist.name for e in entries],
        )
    else:
        build_symlinks(entries, layout, python)
    after = os.times()
    return {
        "wall": time.perf_counter() - start,
        "user": after.user - before.user,
        "sys": after.system - before.system,
    }


def _import_all(
    python: str, site: Path, names: list[str], env: dict[str, str]
) -> tuple[float, float, str]:
    """Wall and CPU seconds to import ``names`` from ``site`` in a fresh interpreter, and the
    names that imported."""
    done = subprocess.run(
        [python, "-S", "-c", _IMPORT_ALL, str(site), ",".join(names)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu, ok = [*done.stdout.strip().splitlines()[-1].split(" "), ""][:3]
    return float(wall), float(cpu), ok


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tmp", type=Path)
    parser.add_argument("--no-imports", action="store_true", help="time the builds only")
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/generation-layout.json")
    )
    args = parser.parse_args()
    entries = _entries(args.store)
    names = sorted({n for e in entries for n in e.dist.top_level if n.isidentifier()})
    work = Path(tempfile.mkdtemp(prefix="kvenv-layout-", dir=args.tmp))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    builds: dict[str, list[dict[str, float]]] = {"links": [], "symlinks": []}
    for number in range(args.rounds):
        kinds = ["links", "symlinks"] if number % 2 == 0 else ["symlinks", "links"]
        for kind in kinds:
            builds[kind].append(_timed_build(kind, entries, work / f"{kind}-{number}", args.python))
    # one generation of each layout for the imports; its bytecode written once (not timed)
    links, symlinks = work / "links-0", work / "symlinks-0"
    if not links.exists() or not symlinks.exists():
        raise SystemExit("no generation built")
    cases = {
        "links": (links / "site", dict(base_env)),
        "symlinks+prefix": (
            symlinks / "site",
            dict(base_env, PYTHONPYCACHEPREFIX=str(symlinks / "pycache")),
        ),
        "symlinks, no cache": (symlinks / "site", dict(base_env, PYTHONDONTWRITEBYTECODE="1")),
    }
    if args.no_imports:
        cases = {}
    imported: dict[str, str] = {}
    for case, (site, env) in cases.items():
        imported[case] = _import_all(args.python, site, names, env)[2]  # writes the bytecode
    imports: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
    for number in range(args.rounds):
        order = list(cases) if number % 2 == 0 else list(reversed(cases))
        for case in order:
            site, env = cases[case]
            imports[case].append(_import_all(args.python, site, names, env)[:2])
    same = len(set(imported.values())) <= 1
    results = {
        "build": {
            kind: {
                key: round(statistics.median(r[key] for r in rows), 4)
                for key in ("wall", "user", "sys")
            }
            for kind, rows in builds.items()
        },
        "import_all_wall_s": {
            case: round(statistics.median(w for w, _ in v), 4) for case, v in imports.items()
        },
        "import_all_cpu_s": {
            case: round(statistics.median(c for _, c in v), 4) for case, v in imports.items()
        },
        "import_samples": {case: [round(w, 4) for w, _ in v] for case, v in imports.items()},
        "modules": len(names),
        "modules_imported": len(imported["links"].split(",")) if imported.get("links") else 0,
        "same_modules_imported": same,
        "imported_only_with_links": {
            case: sorted(set(imported["links"].split(",")) - set(ok.split(",")))
            for case, ok in imported.items()
            if case != "links"
        },
        "imported_only_without_links": {
            case: sorted(set(ok.split(",")) - set(imported["links"].split(",")))
            for case, ok in imported.items()
            if case != "links"
        },
        "files": sum(len(e.dist.files) for e in entries),
        "symlinks": sum(1 for p in (symlinks / "site").iterdir() if p.is_symlink()),
    }
    data = {"benchmark": "generation-layout", "wheels": len(entries), **run_facts(), **results}
    write_results(args.out, data)
    print(data)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
