"""``kvenv lock``: write (or ``--check``) the overlay lock of a profile."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvenv.cli._io import emit_json, err, out
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
    from kvenv.model.loading import load_profile

    loaded = load_profile(args.profile)
    if args.check:
        return _check(args, loaded)
    return _lock(args, loaded)


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
    lock = read_lock(path)
    host = recorded_host(loaded, must_exist=True).snapshot
    report = check_lock(loaded, lock, host, _wheel_at_hand(args.cache_dir))
    if args.json:
        emit_json(report.to_json())
        return EXIT_OK if report.ok else EXIT_CHECK_FAILED
    for reason in report.skipped:
        err(f"skipped: {reason}")
    if report.ok:
        count = len(lock.pylock.packages)
        if report.skipped:
            out(f"ok: {path} is valid and current ({count} packages); target checks skipped")
        else:
            out(f"ok: {path} is valid, complete and current ({count} packages)")
        return EXIT_OK
    raise CheckFailed(
        f"lock check failed: {path}",
        problems=report.problems,
        hint="; ".join(report.stale)
        + ("; " if report.stale else "")
        + f"relock with `kvenv lock {loaded.profile.name}`",
    )


def _lock(args: argparse.Namespace, loaded: Any) -> int:
    from kvenv.lock.engine import LockOptions, lock_profile, parse_exclude_newer, summary
    from kvenv.lock.pylock import write_lock
    from kvenv.lock.sources import index_config

    config = index_config(
        index_url=args.index_url,
        extra_index_urls=args.extra_index_url,
        find_links=args.find_links,
        no_index=args.no_index,
        environ=os.environ,
        base=Path.cwd(),
    )
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
    memo = _memo(args, loaded, config, options) if args.offline and not args.refresh else None
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
    if args.json:
        emit_json(data)
        return EXIT_OK
    out(f"{'wrote' if data['changed'] else 'unchanged'}: {data['lock']}")
    shadows: list[dict[str, str]] = list(data["shadows"])
    out(
        f"  {len(data['packages'])} packages for {data['target']}; "
        f"{data['assumptions']} host assumptions; {len(shadows)} shadowed host packages"
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


def _memo(args: argparse.Namespace, loaded: Any, config: Any, options: Any) -> _Memo:
    """The memo entry of this offline lock: its key covers every input it reads."""
    from kvenv.lock.memo import memo_key
    from kvenv.model.locations import default_cache_dir

    root = options.cache_dir or default_cache_dir()
    output = options.output or loaded.lock_path
    files = [
        *loaded.chain,
        loaded.snapshot_path,
        loaded.lock_path,
        output,
        options.native_requires,
        *options.require,
        *options.prefer,
        *options.constraint,
    ]
    settings = {
        "index": [config.index_url, list(config.extra_index_urls), config.no_index],
        "find-links": list(config.find_links),
        "exclude-newer": args.exclude_newer,
        "fresh": args.fresh,
        "portable": args.portable,
        "output": str(output),
    }
    key = memo_key(files=files, settings=settings, cache_root=root, find_links=config.find_links)
    at_hand = _wheel_at_hand(args.cache_dir)

    def present(sha256: str, filename: str) -> bool:
        found = at_hand(sha256, filename, None)
        return found is not None and found.is_file()

    return _Memo(root, key, present)


def _cache_dir(value: str | None) -> Path | None:
    """``--cache-dir``, absolute; an empty one is refused (it would mean the current dir)."""
    from kvenv.model.locations import given_path

    return None if value is None else given_path(value, "--cache-dir")


def _wheel_at_hand(cache_dir: str | None) -> Callable[[str, str, int | None], Path | None]:
    """Where a wheel would sit in kvenv's artifact cache (for the lock's protected-name check;
    the entry is content-addressed; the lock engine checks its size, then reads its file list)."""

    def find(sha256: str, filename: str, size: int | None) -> Path | None:
        from kvenv.fetch.cache import ArtifactCache, default_cache_root

        root = _cache_dir(cache_dir) or default_cache_root()
        return ArtifactCache(root).entry(sha256) / filename

    return find
