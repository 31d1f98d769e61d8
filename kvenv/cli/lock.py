"""``kvenv lock``: write (or ``--check``) the overlay lock of a profile."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvenv.cli._io import counted, emit_json, err, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "lock",
        help="resolve the native wheel's overlay for the profile's target into a pylock",
        description="Resolve what the target host lacks for the native wheel (never a protected "
        "package) and write it as a hashed PEP 751 pylock.<profile>.toml. With --check, verify "
        "an existing lock offline instead. Exit codes: 0 ok, 1 check failed (stale or "
        "incomplete lock), 2 bad input, 3 conflict.",
    )
    parser.add_argument("profile", nargs="?", help="profile name or .toml path")
    parser.add_argument(
        "--check", action="store_true", help="verify the lock offline; write nothing"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--output", "-o", type=Path, help="where to write (default: the profile's lock path)"
    )
    parser.add_argument("--index-url", help="the main index (default: unearth's default index)")
    parser.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    parser.add_argument("--no-index", action="store_true", help="use only --find-links")
    parser.add_argument(
        "--exclude-newer",
        metavar="DATE",
        help="ignore files uploaded after DATE (RFC 3339 or date)",
    )
    parser.add_argument("--offline", action="store_true", help="use only the cache; no network")
    parser.add_argument("--refresh", action="store_true", help="revalidate cached index pages")
    parser.add_argument(
        "--native-requires",
        type=Path,
        metavar="FILE",
        help="the native wheel's requirements (requirements file) when its source is unreachable",
    )
    for flags, text in (
        (("--require",), "extra top-level requirements for the overlay (e.g. a validated pin set)"),
        (("--prefer",), "preferred versions (name==version lines), used when they fit"),
        (
            ("--constraint", "-c"),
            "version bounds applied whenever a package is needed (adds nothing)",
        ),
    ):
        parser.add_argument(
            *flags, type=Path, action="append", default=[], metavar="FILE", help=text
        )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="ignore the existing lock's recorded inputs (its pins, one-off --require/-c); "
        "what the profile declares stays",
    )
    parser.add_argument(
        "--upgrade",
        "-U",
        action="store_true",
        help="move every package to the newest version that fits (keep no pin of the lock)",
    )
    parser.add_argument(
        "--upgrade-package",
        "-P",
        action="append",
        default=[],
        metavar="NAME[==VERSION]",
        help="move NAME to the newest version that fits (or to VERSION); every other package "
        "keeps its pin; repeatable",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve and say what would change; write nothing",
    )
    add_format_flag(parser)
    parser.add_argument("--cache-dir", help="cache directory (default: user cache)")
    parser.add_argument(
        "--portable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write index wheels as paths into the project's wheels/ directory, naming no "
        "index host (the default for new locks; a rerun keeps what the lock recorded); "
        "--no-portable writes each wheel's index URL",
    )
    parser.set_defaults(func=run)
    diff = sub.add_parser(
        "diff",
        help="what changed between two lock files (added, removed, updated, native, host)",
        description="Compare two pylock files offline, as `kvenv lock` reports its own "
        "changes: e.g. review a pull request's lock (`git show main:locks/pylock.P.toml > "
        "old.toml; kvenv diff old.toml locks/pylock.P.toml`).",
    )
    diff.add_argument("old", type=Path, help="the lock before")
    diff.add_argument("new", type=Path, help="the lock after")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    add_format_flag(diff)
    diff.set_defaults(func=run_diff)


def add_format_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="how to print the changes: text (default) or a markdown table for a pull request",
    )


def run_diff(args: argparse.Namespace) -> int:
    """``kvenv diff OLD NEW``: the changes between two lock files."""
    from kvenv.lock.changes import lock_changes

    old, new = (_lock_document(path) for path in (args.old, args.new))
    changes = lock_changes(old, new)
    if args.json:
        emit_json({"old": str(args.old), "new": str(args.new), "changes": changes.to_json()})
        return EXIT_OK
    _print_changes(args, changes.to_json(), title=f"{args.new.name} changes")
    return EXIT_OK


def _lock_document(path: Path) -> dict[str, Any]:
    """A lock file read as TOML; one that is not a PEP 751 lock is refused (nothing to compare)."""
    from kvenv._util import tomlio
    from kvenv.errors import InputError, Problem
    from kvenv.lock.pylock import MAX_LOCK_BYTES

    document = tomlio.read(path, max_bytes=MAX_LOCK_BYTES, what="lock")
    if "lock-version" not in document or not isinstance(document.get("packages", []), list):
        raise InputError(
            f"not a lock file: {path}",
            problems=[
                Problem(
                    "no lock-version (or no [[packages]] array): this is not a PEP 751 lock",
                    file=str(path),
                    path="$.lock-version",
                    fix="give two pylock.*.toml files",
                )
            ],
        )
    return document


def _print_changes(args: argparse.Namespace, data: dict[str, Any], *, title: str) -> None:
    """The change lines (or, with ``--format markdown``, the table) of ``data``, a
    :meth:`kvenv.lock.changes.Changes.to_json`."""
    from kvenv.lock.changes import Changes, markdown, text_lines

    changes = Changes.from_json(data)
    if args.format == "markdown":
        out(markdown(changes, title=title).rstrip("\n"))
        return
    lines = text_lines(changes)
    for line in lines:
        out(line)
    if not lines:
        out("No changes to packages, the native pin or the host")


def run(args: argparse.Namespace) -> int:
    from kvenv.errors import KvenvError

    code = None
    try:
        if args.check:
            code = _quick_check(args)
        elif args.offline and not args.refresh:
            code = _quick_lock(args)
    except KvenvError:  # e.g. an empty $KVENV_CACHE_DIR: the full path reports what it finds
        code = None
    if code is not None:
        return code
    from kvenv.model.loading import load_profile

    loaded = load_profile(args.profile)
    if getattr(args, "on_success", None) is not None:  # recorded once the command succeeded
        args.on_success.append(lambda: _remember(args, loaded))
    if args.check:
        return _check(args, loaded)
    return _lock(args, loaded)


def _remember(args: argparse.Namespace, loaded: Any) -> None:
    """Keep the facts of a profile that loaded (:mod:`kvenv.model.facts`). Best effort."""
    from kvenv.model.facts import remember_facts

    remember_facts(loaded, args.profile, cache=args.cache_dir)


def _root(args: argparse.Namespace) -> Path:
    """The memo root (``--cache-dir``, else the user's cache), where :mod:`kvenv.lock.quick`'s
    records go; it is also the artifact cache a check looks in for wheels at hand (as
    :func:`_wheel_at_hand`) and the lock cache."""
    from kvenv.model.places import memo_root

    return memo_root(args.cache_dir)


def _quick_check(args: argparse.Namespace) -> int | None:
    """A check that passed before and whose every input is unchanged, answered from its record
    (:mod:`kvenv.lock.quick`) exactly as the full check answers it; None: run the full check."""
    from kvenv.lock.quick import CHECK_KIND, check_key, recall

    root = _root(args)
    kept = recall(root, CHECK_KIND, check_key(args.profile, args.output, root, _indexes(args)))
    if kept is None:
        return None
    try:
        report, count, skipped = kept["json"], int(kept["count"]), list(kept["skipped"])
        return _passed(args, Path(kept["path"]), report, count, skipped)
    except (KeyError, TypeError, ValueError):
        return None


def _passed(
    args: argparse.Namespace, path: Path, report: dict[str, Any], count: int, skipped: list[str]
) -> int:
    """Print a check that passed: ``report`` (the check's JSON) with ``--json``, else the
    skipped checks on stderr and one line on stdout."""
    if args.json:
        emit_json(report)
        return EXIT_OK
    for reason in skipped:
        err(f"skipped: {reason}")
    packages = counted(count, "package")
    if skipped:
        out(f"ok: {path} is valid and current ({packages}); target checks skipped")
    else:
        out(f"ok: {path} is valid, complete and current ({packages})")
    return EXIT_OK


def _check(args: argparse.Namespace, loaded: Any) -> int:
    from kvenv.errors import CheckFailed, LockError
    from kvenv.lock.check import check_lock
    from kvenv.lock.pylock import read_lock
    from kvenv.model.loading import recorded_host

    path: Path = args.output or loaded.lock_path
    if not path.is_file():
        raise LockError(
            f"no lock file at {path}", hint=f"create it with `kvenv lock {loaded.profile.name}`"
        )
    from kvenv._util import memo

    with memo.recording() as reads:  # what the check reads, as it reads it
        lock = read_lock(path)
        host = recorded_host(loaded, must_exist=True).snapshot
        report = check_lock(loaded, lock, host, _wheel_at_hand(args.cache_dir), _published(args))
    if report.ok:
        from contextlib import suppress

        from kvenv.errors import KvenvError
        from kvenv.lock.quick import CHECK_KIND, check_key

        count, skipped = len(lock.pylock.packages), list(report.skipped)
        kept = {"path": str(path), "json": report.to_json(), "count": count, "skipped": skipped}
        with suppress(KvenvError):  # a blank --cache-dir or $KVENV_CACHE_DIR: nothing kept
            root = _root(args)
            key = check_key(args.profile, args.output, root, _indexes(args))
            memo.put(root, CHECK_KIND, key, [*loaded.reads, *reads.deps], kept)
        return _passed(args, path, report.to_json(), count, skipped)
    if args.json:
        emit_json(report.to_json())
        return EXIT_CHECK_FAILED
    for reason in report.skipped:
        err(f"skipped: {reason}")
    raise CheckFailed(
        f"lock check failed: {path}",
        problems=report.problems,
        hint="; ".join(report.stale)
        + ("; " if report.stale else "")
        + f"relock with `kvenv lock {loaded.profile.name}`",
    )


def _quick_lock(args: argparse.Namespace) -> int | None:
    """An unchanged offline lock answered from its record (:mod:`kvenv.lock.quick`) without
    loading the profile; None (then the full path runs) on any miss."""
    from kvenv.lock.indexflags import index_values
    from kvenv.lock.quick import RESULT_KIND, recall, result_key

    root = _root(args)
    kept = recall(
        root, RESULT_KIND, result_key(_flags(args), index_values(**_index_flags(args)), root)
    )
    if kept is None:
        return None
    try:
        text, data = str(kept["text"]), dict(kept["summary"])
    except (KeyError, TypeError, ValueError):
        return None
    data["changed"] = False  # only a lock that left the file as it was is kept
    data["dry-run"] = bool(args.dry_run)
    return _report(args, data, _package_count(text))


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags an offline lock's record is kept under (:data:`kvenv.lock.quick.RESULT_FLAGS`)."""
    from kvenv.lock.quick import RESULT_FLAGS

    return {name: getattr(args, name) for name in RESULT_FLAGS}


def _index_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The index flags of ``kvenv lock`` with the environment and the working directory, as
    :func:`kvenv.lock.indexflags.index_values` (and ``index_config``) take them."""
    return {
        "index_url": args.index_url,
        "extra_index_urls": args.extra_index_url,
        "find_links": args.find_links,
        "no_index": args.no_index,
        "environ": os.environ,
        "base": Path.cwd(),
    }


def _lock(args: argparse.Namespace, loaded: Any) -> int:
    from kvenv.lock.engine import LockOptions, lock_profile, parse_exclude_newer, summary
    from kvenv.lock.pylock import write_lock
    from kvenv.lock.sources import index_config

    config = index_config(**_index_flags(args))
    options = LockOptions(
        index=config,
        output=args.output,
        native_requires=args.native_requires,
        require=tuple(args.require),
        prefer=tuple(args.prefer),
        constraint=tuple(args.constraint),
        exclude_newer=parse_exclude_newer(args.exclude_newer) if args.exclude_newer else None,
        offline=args.offline,
        refresh=args.refresh,
        fresh=args.fresh,
        upgrade=args.upgrade,
        upgrade_packages=tuple(args.upgrade_package),
        cache_dir=_cache_dir(args.cache_dir),
        portable=args.portable,
        wheel_at_hand=_wheel_at_hand(args.cache_dir),
    )
    index = (config.index_url, config.extra_index_urls, config.find_links, config.no_index)
    kept = args.offline and not args.refresh  # an online lock reads the index: never kept
    if kept:
        from kvenv.lock.quick import result_inputs

        flags, root = _flags(args), _root(args)
        inputs = result_inputs(  # before the resolution reads them
            flags,
            lock=loaded.lock_path,
            snapshot=loaded.snapshot_path,
            cache_root=root,
            find_links=config.find_links,
        )
    from kvenv._util import memo

    with memo.recording() as reads:  # the wheels at hand the protected-name check looks for
        result = lock_profile(loaded, options)
    if result.changed and not args.dry_run:
        write_lock(result.path, result.text)
    data = dict(summary(result))
    data["dry-run"] = bool(args.dry_run)
    data["changes"] = _changes(result.old, result.text, result.path)
    data["kept"] = list(result.kept)
    if kept and not result.changed:
        from kvenv.lock.quick import RESULT_KIND, result_key

        value = {"text": result.text, "summary": data}
        deps = [*loaded.reads, *inputs, *reads.deps]
        memo.put(root, RESULT_KIND, result_key(flags, index, root), deps, value)
    return _report(args, data, _package_count(result.text))


def _changes(old: str | None, new: str, path: Path) -> dict[str, Any]:
    """The changes from the lock's text ``old`` (None: no lock) to ``new``, as JSON. An old
    text that is not a lock (damaged, hand-edited into nonsense) counts as no lock."""
    from kvenv._util import tomlio
    from kvenv.errors import KvenvError
    from kvenv.lock.changes import lock_changes

    before = None
    if old is not None:
        try:
            before = tomlio.loads(old, file=str(path))
        except KvenvError:
            before = None
    return lock_changes(before, tomlio.loads(new, file=str(path))).to_json()


def _package_count(text: str) -> int:
    """How many ``[[packages]]`` a lock's text holds (the native wheel's entry included): the
    array-of-tables headers kvenv's writer puts on lines of their own, counted without
    parsing the document (the recalled lock prints this without loading TOML)."""
    return sum(1 for line in text.splitlines() if line.strip() == "[[packages]]")


def _report(args: argparse.Namespace, data: dict[str, Any], packages: int) -> int:
    """Print a lock's summary (``--json``: the summary itself). ``packages``: the lock's
    ``[[packages]]`` (the native wheel's entry included), the count ``lock --check`` prints."""
    if args.json:
        emit_json(data)
        return EXIT_OK
    kept = list(data.get("kept", []))
    if kept:
        shown = ", ".join(kept[:3]) + (f" and {len(kept) - 3} more" if len(kept) > 3 else "")
        err(
            f"note: kept from the lock: {shown} (declare them in the profile with `kvenv add`, "
            "or drop them with --fresh)"
        )
    if args.format == "markdown":
        changes = data.get("changes")
        if changes is not None:
            _print_changes(args, changes, title=f"{Path(data['lock']).name} changes")
        return EXIT_OK
    if data["changed"] and data.get("dry-run"):
        verb = "would write"
    else:
        verb = "wrote" if data["changed"] else "unchanged"
    out(f"{verb}: {data['lock']}")
    shadows: list[dict[str, str]] = list(data["shadows"])
    overlay = len(data["packages"])
    native = "the native wheel and " if packages > overlay else ""
    out(
        f"  {counted(packages, 'package')} for {data['target']}: {native}{overlay} in the "
        f"overlay; {counted(int(data['assumptions']), 'host assumption')}; "
        f"{counted(len(shadows), 'shadowed host package')}"
    )
    for shadow in shadows:
        err(
            f"  note: the overlay shadows host {shadow['name']} {shadow['host-version']} "
            f"with {shadow['overlay-version']}"
        )
    if data.get("changes") is not None and data["changed"]:
        _print_changes(args, data["changes"], title="")
    return EXIT_OK


def _indexes(args: argparse.Namespace) -> list[Any]:
    """The index flags and variables, as values (a check's record is kept under them)."""
    from kvenv.lock.indexflags import index_values

    return list(index_values(**_index_flags(args)))


def _published(args: argparse.Namespace) -> Any:
    """The sha256 the indexes publish for a wheel, from kvenv's page cache only (offline)."""
    from kvenv.lock.cache import IndexCache
    from kvenv.lock.published import published_in_cache
    from kvenv.model.locations import default_cache_dir

    def indexes() -> list[str]:
        from kvenv.lock.sources import index_config

        return index_config(**_index_flags(args)).index_urls()

    cache = IndexCache(_cache_dir(args.cache_dir) or default_cache_dir())
    return published_in_cache(cache, indexes)


def _cache_dir(value: str | None) -> Path | None:
    """``--cache-dir``, absolute; an empty one is refused (it would mean the current dir)."""
    from kvenv.model.places import given_path

    return None if value is None else given_path(value, "--cache-dir")


def _wheel_at_hand(cache_dir: str | None) -> Callable[[str, str, int | None], Path | None]:
    """Where a wheel would sit in kvenv's artifact cache (for the lock's protected-name check;
    the entry is content-addressed; the lock engine checks its size, then reads its file list)."""

    def find(sha256: str, filename: str, size: int | None) -> Path | None:
        from kvenv._util import memo
        from kvenv.fetch.cache import ArtifactCache, default_cache_root

        root = _cache_dir(cache_dir) or default_cache_root()
        path = ArtifactCache(root).entry(sha256) / filename
        memo.note("stat", str(path))  # a kept lock or check holds while it is as it was
        return path

    return find
