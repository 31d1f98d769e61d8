"""Profile commands: ``kvenv profiles``, ``show``, ``validate`` and ``schema``.

Nothing heavy at module level: the profile machinery is imported by the command that runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvenv.cli._io import emit_json, out
from kvenv.cli.exitcodes import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK

if TYPE_CHECKING:
    from kvenv.errors import KvenvError
    from kvenv.model.loading import LoadedProfile


def register(sub: Any) -> None:
    p = sub.add_parser("profiles", help="list the profiles kvenv can find, and where from")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("show", help="show a profile after `extends` (default: the default one)")
    p.add_argument("profile", nargs="?", metavar="NAME|PATH", help="profile name or .toml path")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the merged profile and facts as JSON")
    form.add_argument("--toml", action="store_true", help="the merged profile as TOML")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "validate",
        help="check profiles (exit 0 all valid, 1 any invalid, 2 any unreadable)",
    )
    p.add_argument("profiles", nargs="*", metavar="NAME|PATH", help="default: the default one")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_validate)

    from kvenv.cli.schemas import SCHEMAS

    names = ", ".join(SCHEMAS)
    p = sub.add_parser(
        "schema",
        help="print a JSON Schema (profile, host, ...)",
        description=f"Print the JSON Schema of one of kvenv's documents. Schemas: {names}.",
    )
    p.add_argument("name", metavar="NAME", help=f"which schema: {names}")
    p.set_defaults(func=cmd_schema)


def _display(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def cmd_profiles(args: argparse.Namespace) -> int:
    from kvenv.errors import KvenvError
    from kvenv.model.loading import iter_misnamed, iter_profiles, load_profile

    rows: list[dict[str, Any]] = []
    for name, origin, path in iter_profiles():
        row: dict[str, Any] = {"name": name, "origin": origin, "path": _display(path)}
        try:
            row["description"] = load_profile(str(path)).profile.description
            row["valid"] = True
        except KvenvError as error:  # any file's own error: the others are still listed
            reason = _reason(error)
            row["description"] = f"(invalid: {reason}; see `kvenv validate {name}`)"
            row["valid"] = False
            row["problem"] = reason
        rows.append(row)
    for name, origin, path, why in iter_misnamed():
        rows.append(
            {
                "name": name,
                "origin": origin,
                "path": _display(path),
                "description": f"(invalid: {why}; rename the file)",
                "valid": False,
                "problem": why,
            }
        )
    if args.json:
        emit_json({"profiles": rows})
        return EXIT_OK
    if not rows:
        out("no profiles found")
        return EXIT_OK
    name_width = max(len(r["name"]) for r in rows)
    origin_width = max(len(r["origin"]) for r in rows)
    for r in rows:
        about = _one_line(r["description"]) if r["valid"] else r["description"]
        out(f"{r['name']:<{name_width}}  {r['origin']:<{origin_width}}  {about}")
    return EXIT_OK


def _reason(error: KvenvError) -> str:
    """Why a profile is invalid, on one line: its first problem (``$.path: message``)."""
    if not error.problems:
        return _one_line(error.message)
    first = error.problems[0]
    more = f" (and {len(error.problems) - 1} more)" if len(error.problems) > 1 else ""
    where = f" at {first.path}" if first.path and first.path != "$" else ""
    return _one_line(f"{first.message}{more}{where}")


DESCRIPTION_WIDTH = 120  # `kvenv profiles` shows this much of a description's first line


def _one_line(text: str) -> str:
    """The first line of ``text``, cut to ``DESCRIPTION_WIDTH`` characters with an ellipsis."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > DESCRIPTION_WIDTH:
        return first[: DESCRIPTION_WIDTH - 1] + "…"
    return first


def cmd_show(args: argparse.Namespace) -> int:
    from kvenv.model.loading import dump_profile, load_profile, profile_to_dict

    loaded = load_profile(args.profile)
    if args.toml:
        out(dump_profile(loaded.profile, schema_line=None).rstrip("\n"))
    elif args.json:
        emit_json(
            {
                "name": loaded.profile.name,
                "origin": loaded.origin,
                "path": str(loaded.path),
                "chain": [str(p) for p in loaded.chain],
                "digest": loaded.digest,
                "lock": str(loaded.lock_path),
                "snapshot": str(loaded.snapshot_path) if loaded.snapshot_path else None,
                "profile": profile_to_dict(loaded.profile),
            }
        )
    else:
        for line in _summary(loaded):
            out(line)
    return EXIT_OK


def _summary(loaded: LoadedProfile) -> list[str]:
    p = loaded.profile
    lines = [f"profile   {p.name}  ({loaded.origin}: {_display(loaded.path)})"]
    for parent in loaded.chain[1:]:
        lines.append(f"extends   {_display(parent)}")
    if p.description:
        lines.append(f"about     {p.description}")
    lines.append(f"digest    {loaded.digest}")
    t = p.target
    if t is not None:
        libc = f", glibc {t.glibc}" if t.glibc else ""
        lines.append(f"target    {t.implementation} {t.python} ({t.abi}), {t.os} {t.machine}{libc}")
        gpu = []
        if t.gpu is not None:
            g = t.gpu
            gpu.append(f"{g.count} x {g.model}")
            if g.compute_capability:
                gpu.append(f"compute capability {g.compute_capability}")
            if g.memory_mib:
                gpu.append(f"{g.memory_mib} MiB")
        if t.driver_min:
            gpu.append(f"driver >= {t.driver_min}")
        if t.cuda:
            gpu.append(f"CUDA {t.cuda}")
        if gpu:
            lines.append(f"gpus      {', '.join(gpu)}")
    h = p.host
    snapshot = h.snapshot or "none (live probe)"
    lines.append(f"host      snapshot {snapshot}; protected: {', '.join(h.protected) or 'none'}")
    for waiver in h.waivers:
        lines.append(f"waiver    {waiver.name}: {waiver.reason}")
    n = p.native
    if n is not None:
        size = f", {n.size} bytes" if n.size else ""
        lines.append(f"native    {n.name} {n.version}{size}, sha256 {n.sha256}")
        lines.append(f"from      {_source(n.source)}")
    lock_state = "present" if loaded.lock_path.is_file() else "not written yet: `kvenv lock`"
    lines.append(f"lock      {p.lock_relpath} ({lock_state})")
    if p.paths.root or p.paths.cache:
        lines.append(f"paths     root {p.paths.root or '-'}, cache {p.paths.cache or '-'}")
    r = p.runtime
    settings = [
        f"{key}={_toml_scalar(value)}"
        for key, value in (
            ("dtype", r.dtype),
            ("enforce_eager", r.enforce_eager),
            ("disable_custom_all_reduce", r.disable_custom_all_reduce),
            ("tensor_parallel_size", r.tensor_parallel_size),
            ("max_model_len", r.max_model_len),
            ("gpu_memory_utilization", r.gpu_memory_utilization),
            ("attention_backend", r.attention_backend),
        )
        if value is not None
    ]
    settings += [f"env {key}={value}" for key, value in sorted(r.env.items())]
    if settings:
        lines.append(f"runtime   {', '.join(settings)}")
    return lines


def _source(source: Any) -> str:
    from kvenv._util.redact import redact_url

    kind = source.kind
    if kind == "hf":
        where = "" if source.repo_type == "model" else f" ({source.repo_type})"
        return f"hf {source.repo}{where} @ {source.revision}: {source.filename}"
    if kind == "url":
        return f"url {redact_url(source.url)}"
    if kind == "path":
        return f"path {source.path}"
    index = redact_url(source.index_url) if source.index_url else "the default index"
    return f"index {index}" + (f": {source.filename}" if source.filename else "")


def _toml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cmd_validate(args: argparse.Namespace) -> int:
    refs: list[str | None] = list(args.profiles) or [None]
    results: list[dict[str, Any]] = []
    code = EXIT_OK
    for ref in refs:
        result = _validated(ref, with_digest=args.json)
        if result is None:
            result = _validate(ref, with_digest=args.json)
        if result["status"] != "valid":
            unreadable = result["status"] == "unreadable"
            code = max(code, EXIT_BAD_INPUT if unreadable else EXIT_CHECK_FAILED)
        results.append(result)
    if args.json:
        for result in results:
            result.pop("lines", None)
        emit_json({"valid": code == EXIT_OK, "results": results})
        return code
    for result in results:
        if result["status"] == "valid":
            out(f"valid       {result['name']} ({_display(Path(result['path']))})")
        else:
            out(f"{result['status']:<11} {result['ref']}: {result['message']}")
            for line in result["lines"]:
                out(line)
    return code


def _validated(ref: str | None, *, with_digest: bool) -> dict[str, Any] | None:
    """The result of a profile that loaded and validated before with this kvenv and whose
    files are unchanged (:mod:`kvenv.model.facts`), without loading it; None: load it.
    ``ref`` None is the default profile, whose name is needed only for ``--json``."""
    from kvenv.model.facts import cached_facts

    shown = ref
    if ref is None and with_digest:
        import os

        from kvenv.model.places import DEFAULT_PROFILE, ENV_DEFAULT

        shown = os.environ.get(ENV_DEFAULT) or DEFAULT_PROFILE
    facts = cached_facts(ref)  # a miss, never an error (a blank $KVENV_CACHE_DIR included)
    if facts is None:
        return None
    result: dict[str, Any] = {"ref": shown, "status": "valid", "name": facts.name}
    result["path"] = str(facts.path)
    if with_digest:
        result["digest"] = facts.digest
    return result


def _validate(ref: str | None, *, with_digest: bool) -> dict[str, Any]:
    """Load and check the profile ``ref`` names (None: the default one); record the facts of
    one that is valid, so the next check of the same files is a lookup."""

    from kvenv.errors import ProfileError, ProfileNotReadable
    from kvenv.model.facts import remember_facts
    from kvenv.model.loading import default_profile_ref, load_profile

    result: dict[str, Any] = {"ref": ref or default_profile_ref()}
    try:
        loaded = load_profile(ref)
    except ProfileError as error:
        unreadable = isinstance(error, ProfileNotReadable)
        result["status"] = "unreadable" if unreadable else "invalid"
        result["message"] = error.message
        result["problems"] = [p.to_json() for p in error.problems]
        result["hint"] = error.hint
        result["lines"] = [f"  - {p.render()}" for p in error.problems]
        if error.hint:
            result["lines"].append(f"  hint: {error.hint}")
        return result
    remember_facts(loaded, ref)  # best effort (a blank $KVENV_CACHE_DIR: nothing recorded)
    result["status"] = "valid"
    result["name"] = loaded.profile.name
    result["path"] = str(loaded.path)
    if with_digest:  # the digest costs hashlib's import: only where it is shown
        result["digest"] = loaded.digest
    return result


def cmd_schema(args: argparse.Namespace) -> int:
    from kvenv.cli.schemas import generate
    from kvenv.model.schema import dumps_schema

    out(dumps_schema(generate(args.name)).rstrip("\n"))
    return EXIT_OK
