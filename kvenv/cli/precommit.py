"""The pre-commit hooks of ``.pre-commit-hooks.yaml``: ``python -m kvenv.cli.precommit
validate|lock-check FILE...`` checks the profiles the changed files belong to.

pre-commit passes the changed files its ``files:`` pattern matched (profiles, locks, host
snapshots). A profile is affected when one of them is its file, a file it extends, its lock or
its host snapshot; the profiles looked at are those of ``profiles/*.toml`` in the working
directory (pre-commit runs hooks at the repository's root) and any changed ``.toml`` that is
a profile. ``validate`` runs ``kvenv validate`` on the affected profiles at once;
``lock-check`` runs ``kvenv lock --check`` on each. The exit code is kvenv's (the largest of
the runs): 0 all passed, 1 a check failed, 2 bad input, 3 a conflict.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

USAGE = "usage: python -m kvenv.cli.precommit validate|lock-check [FILE ...]"


def _key(path: Path) -> str:
    return os.path.normcase(os.path.realpath(path))


def affected_profiles(files: Sequence[str], cwd: Path) -> list[Path]:
    """The profiles (sorted, as paths) that ``files`` touch: the file itself, a file of its
    ``extends`` chain, its lock or its host snapshot. A changed profile that cannot be loaded
    is affected too, so its error is reported."""
    from kvenv.errors import KvenvError
    from kvenv.model.loading import load_profile

    changed = {_key(cwd / f) for f in files}
    candidates = {_key(p): p for p in sorted((cwd / "profiles").glob("*.toml"))}
    for name in files:
        path = cwd / name
        if name.endswith(".toml") and not Path(name).name.startswith("pylock."):
            candidates.setdefault(_key(path), path)
    out: list[Path] = []
    for key, path in sorted(candidates.items(), key=lambda item: str(item[1])):
        try:
            loaded = load_profile(str(path), cwd=cwd)
        except KvenvError:
            if key in changed:
                out.append(path)
            continue
        touched = {_key(p) for p in loaded.chain} | {_key(loaded.lock_path)}
        if loaded.snapshot_path is not None:
            touched.add(_key(loaded.snapshot_path))
        if touched & changed:
            out.append(path)
    return out


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def run_hook(argv: Sequence[str], cwd: Path | None = None) -> int:
    """Run one hook (``argv``: the hook's name, then the changed files); kvenv's exit code."""
    from kvenv.cli import main

    if not argv or argv[0] not in ("validate", "lock-check"):
        print(USAGE, file=sys.stderr)
        return 2
    here = cwd or Path.cwd()
    profiles = [_relative(p, here) for p in affected_profiles(argv[1:], here)]
    if not profiles:
        return 0
    if argv[0] == "validate":
        return main(["validate", *profiles])
    return max(main(["lock", profile, "--check"]) for profile in profiles)


if __name__ == "__main__":
    sys.exit(run_hook(sys.argv[1:]))
