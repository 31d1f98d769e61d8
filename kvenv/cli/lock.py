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
        "--fresh", action="store_true", help="ignore the existing lock's recorded inputs"
    )
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
    """Record the facts of a profile that loaded (:mod:`kvenv.model.facts`), and for an
    offline lock its snapshot's path (:mod:`kvenv.lock.quick`): what a repeat needs to answer
    without loading it. Best effort."""
    from kvenv.errors import KvenvError
    from kvenv.model.facts import remember_facts

    remember_facts(loaded, args.profile, cache=args.cache_dir)
    try:
        if not args.check and args.offline and not args.refresh:
            from kvenv.lock.quick import remember_inputs

            remember_inputs(_records(args), loaded.chain, loaded.snapshot_path)
    except KvenvError:  # e.g. an empty --cache-dir: the command itself reports it
        return


def _facts(args: argparse.Namespace) -> Any:
    """The profile's recorded facts, or None (then the profile is loaded)."""
    from kvenv.errors import KvenvError
    from kvenv.model.facts import cached_facts

    try:
        return cached_facts(args.profile, cache=args.cache_dir)
    except KvenvError:  # e.g. an empty --cache-dir: the full path reports it
        return None


def _records(args: argparse.Namespace) -> Path:
    """Where :mod:`kvenv.lock.quick` keeps its records: beside the profile-facts records."""
    from kvenv.model.facts import facts_dir

    return facts_dir(args.cache_dir).parent


def _artifact_root(args: argparse.Namespace) -> Path:
    """The artifact cache a check looks in for wheels at hand (as :func:`_wheel_at_hand`)."""
    from kvenv.model.places import default_cache_dir

    return _cache_dir(args.cache_dir) or default_cache_dir()


def _quick_check(args: argparse.Namespace) -> int | None:
    """A check that passed before and whose every input is unchanged, answered from its record
    (:mod:`kvenv.lock.quick`) exactly as the full check answers it; None: run the full check."""
    facts = _facts(args)
    if facts is None:
        return None
    from kvenv.lock.quick import recall_passed

    path: Path = args.output or facts.lock_path
    root = _artifact_root(args)
    result = recall_passed(_records(args), facts.chain, path, root, digest=facts.digest)
    if result is None:
        return None
    try:
        return _passed(args, path, result["json"], int(result["count"]), list(result["skipped"]))
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
    from kvenv.lock.check import check_lock, files_read
    from kvenv.lock.pylock import read_lock
    from kvenv.model.loading import recorded_host

    path: Path = args.output or loaded.lock_path
    if not path.is_file():
        raise LockError(
            f"no lock file at {path}", hint=f"create it with `kvenv lock {loaded.profile.name}`"
        )
    from kvenv.lock.quick import identities, observe, remember_passed

    observed = observe(path, loaded.snapshot_path)  # before the check reads them
    lock = read_lock(path)
    host = recorded_host(loaded, must_exist=True).snapshot
    at_hand = _wheel_at_hand(args.cache_dir)
    observed["read"] = identities(files_read(loaded, lock, at_hand))
    report = check_lock(loaded, lock, host, at_hand)
    if report.ok:
        from contextlib import suppress

        from kvenv.errors import KvenvError

        count, skipped = len(lock.pylock.packages), list(report.skipped)
        with suppress(KvenvError):  # an empty --cache-dir or $KVENV_CACHE_DIR: no record
            remember_passed(
                _records(args),
                loaded.chain,
                path,
                _artifact_root(args),
                digest=loaded.digest,
                observed=observed,
                result={"json": report.to_json(), "count": count, "skipped": skipped},
            )
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
    """An unchanged offline lock answered from its memo (:mod:`kvenv.lock.memo`) without
    loading the profile: the memo key is made from the recorded facts and inputs, over the
    same files and settings as the full path's. None (then the full path runs) on any miss,
    with ``--exclude-newer`` (whose value the full path checks), or when the lock file on disk
    differs from the kept one (the full path rewrites it)."""
    if args.exclude_newer is not None:
        return None
    facts = _facts(args)
    if facts is None:
        return None
    from kvenv.lock.indexflags import index_values
    from kvenv.lock.quick import recall_inputs

    inputs = recall_inputs(_records(args), facts.chain)
    if inputs is None:
        return None
    index = index_values(**_index_flags(args))
    memo = _memo(args, (*facts.chain, inputs["snapshot"], facts.lock_path), facts.lock_path, index)
    kept = memo.recall()
    if kept is None:
        return None
    text, data = kept
    try:
        path = Path(data["lock"])
        old = path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeError, KeyError, TypeError):
        return None
    if old != text:
        return None
    data["changed"] = False
    return _report(args, data, _package_count(text))


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
        cache_dir=_cache_dir(args.cache_dir),
        portable=args.portable,
        wheel_at_hand=_wheel_at_hand(args.cache_dir),
    )
    index = (config.index_url, config.extra_index_urls, config.find_links, config.no_index)
    profile_files = (*loaded.chain, loaded.snapshot_path, loaded.lock_path)
    memo = (
        _memo(args, profile_files, loaded.lock_path, index)
        if args.offline and not args.refresh
        else None
    )
    kept = memo.recall() if memo is not None else None
    if kept is not None:
        text, data = kept
        path = Path(data["lock"])
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        data["changed"] = old != text
        if data["changed"]:
            write_lock(path, text)
    else:
        result = lock_profile(loaded, options)
        if result.changed:
            write_lock(result.path, result.text)
        data = dict(summary(result))
        if memo is not None:
            wheels = [(p.wheel.sha256, p.wheel.filename) for p in result.resolution.packages]
            memo.remember(result.text, data, [(sha, n) for sha, n in wheels if sha])
        text = result.text
    return _report(args, data, _package_count(text))


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
    out(f"{'wrote' if data['changed'] else 'unchanged'}: {data['lock']}")
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
    return EXIT_OK


class _Memo:
    """One offline lock's memo entry (kvenv.lock.memo), with what checks a kept result."""

    def __init__(self, root: Path, key: str, present: Callable[[str, str], bool]) -> None:
        self.root, self.key, self.present = root, key, present

    def recall(self) -> tuple[str, dict[str, Any]] | None:
        from kvenv.lock.memo import recall

        return recall(self.root, self.key, self.present)

    def remember(self, text: str, data: dict[str, Any], wheels: list[tuple[str, str]]) -> None:
        from kvenv.lock.memo import remember

        remember(self.root, self.key, (text, data), wheels, self.present)


def _memo(
    args: argparse.Namespace,
    profile_files: tuple[Path | None, ...],
    lock_path: Path,
    index: tuple[str | None, tuple[str, ...], tuple[str, ...], bool],
) -> _Memo:
    """The memo entry of this offline lock: its key covers every input it reads.
    ``profile_files``: the profile's ``extends`` chain, its host snapshot and its lock;
    ``index``: (main index, extra indexes, find-links, no-index) as
    :func:`kvenv.lock.indexflags.index_values` gives them."""
    from kvenv.lock.memo import memo_key
    from kvenv.model.places import default_cache_dir

    root = _cache_dir(args.cache_dir) or default_cache_dir()
    output = args.output or lock_path
    files = [
        *profile_files,
        output,
        args.native_requires,
        *args.require,
        *args.prefer,
        *args.constraint,
    ]
    index_url, extra_index_urls, find_links, no_index = index
    settings = {
        "index": [index_url, list(extra_index_urls), no_index],
        "find-links": list(find_links),
        "exclude-newer": args.exclude_newer,
        "fresh": args.fresh,
        "portable": args.portable,
        "output": str(output),
    }
    key = memo_key(files=files, settings=settings, cache_root=root, find_links=find_links)
    from kvenv.fetch.cache import ArtifactCache

    artifacts = ArtifactCache(_artifact_root(args))  # where _wheel_at_hand looks

    def present(sha256: str, filename: str) -> bool:
        return (artifacts.entry(sha256) / filename).is_file()

    return _Memo(root, key, present)


def _cache_dir(value: str | None) -> Path | None:
    """``--cache-dir``, absolute; an empty one is refused (it would mean the current dir)."""
    from kvenv.model.places import given_path

    return None if value is None else given_path(value, "--cache-dir")


def _wheel_at_hand(cache_dir: str | None) -> Callable[[str, str, int | None], Path | None]:
    """Where a wheel would sit in kvenv's artifact cache (for the lock's protected-name check;
    the entry is content-addressed; the lock engine checks its size, then reads its file list)."""

    def find(sha256: str, filename: str, size: int | None) -> Path | None:
        from kvenv.fetch.cache import ArtifactCache, default_cache_root

        root = _cache_dir(cache_dir) or default_cache_root()
        return ArtifactCache(root).entry(sha256) / filename

    return find
