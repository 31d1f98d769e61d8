"""Install commands: ``plan``, ``apply`` (``bootstrap``), ``activate`` (``env``), ``status``,
``verify`` and ``reset``.

Nothing heavy at module level; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import functools
import sys

from kvenv.cli._io import TerminalProgress, detail, emit_json, err, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_CONFLICT, EXIT_OK

TYPE_CHECKING = False  # typing is not imported at run time (start-up, issue 13)

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from kvenv.env.answers import Recording
    from kvenv.env.apply import ApplyResult
    from kvenv.env.shellrender import ActivationView
    from kvenv.fetch.bundle import BundleInfo
    from kvenv.model.loading import LoadedProfile
    from kvenv.model.locations import Locations
    from kvenv.model.snapshot import HostSnapshot
    from kvenv.plan.make import Plan
    from kvenv.probe.interpreter import HostPython

SHELL_CHOICES = ("bash", "zsh", "sh", "fish", "pwsh", "json")


def _profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", nargs="?", metavar="PROFILE", help="name or .toml (default profile)")


def _paths_args(p: argparse.ArgumentParser) -> None:
    from kvenv.cli.options import place_options

    place_options(p)


def python_arg(p: argparse.ArgumentParser) -> None:
    """``--python EXE``: the host interpreter (see kvenv.probe.interpreter for the order)."""
    from kvenv.cli.options import path_value

    p.add_argument(
        "--python",
        type=path_value,
        metavar="EXE",
        help="the host interpreter (default: $KVENV_PYTHON, [host] python, the active "
        "environment, python3 on PATH)",
    )


def register(sub: Any) -> None:
    from kvenv.cli.options import jobs_value, keep_value, path_value

    p = sub.add_parser("plan", help="what `kvenv apply` would do (pure, offline)")
    _profile_arg(p)
    p.add_argument("--json", action="store_true", help="the plan as versioned JSON")
    p.add_argument("--strict", action="store_true", help="turn warnings into errors")
    p.add_argument("--host", metavar="SNAPSHOT", help="a host snapshot JSON instead of a probe")
    python_arg(p)
    _paths_args(p)
    p.set_defaults(func=cmd_plan)

    for name in ("apply", "bootstrap"):
        p = sub.add_parser(
            name,
            help="install the profile into a new generation and switch to it"
            + (" (alias of apply)" if name == "bootstrap" else ""),
        )
        _profile_arg(p)
        p.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
        p.add_argument("--strict", action="store_true", help="turn warnings into errors")
        p.add_argument("--offline", action="store_true", help="no network: cache or bundle only")
        p.add_argument(
            "--from", dest="bundle", type=path_value, metavar="BUNDLE", help="install from a bundle"
        )
        p.add_argument("--json", action="store_true", help="machine-readable result")
        p.add_argument("--no-wait", action="store_true", help="fail if another apply runs")
        p.add_argument(
            "--repair",
            action="store_true",
            help="re-verify the cached wheels and store entries in full, replace what is "
            "damaged, and build a fresh generation even when the applied one matches",
        )
        p.add_argument(
            "--jobs", type=jobs_value, default=8, metavar="N", help="parallel downloads (1-256)"
        )
        p.add_argument(
            "--no-compile",
            action="store_true",
            help="do not compile the wheels' modules to bytecode (by default each is compiled "
            "once per store entry with the host interpreter)",
        )
        p.add_argument(
            "--keep",
            type=keep_value,
            metavar="N",
            help="generations to keep, the new one included (default: "
            "$KVENV_KEEP_GENERATIONS, else 2; at least 2); older ones are removed",
        )
        python_arg(p)
        _paths_args(p)
        p.set_defaults(func=cmd_apply)

    for name in ("activate", "env"):
        p = sub.add_parser(
            name,
            help="print the activation of the applied runtime for a shell"
            + (" (alias of activate)" if name == "env" else ""),
        )
        _profile_arg(p)
        p.add_argument(
            "--shell",
            choices=SHELL_CHOICES,
            help="output format (default: the shell running kvenv, else $SHELL, else bash)",
        )
        p.add_argument(
            "--undo",
            action="store_true",
            help="print what restores the variables a previous activation changed",
        )
        p.add_argument("--manifest", metavar="PATH", help="a manifest instead of the current one")
        _paths_args(p)
        p.set_defaults(func=cmd_activate)

    for name, text, func in (
        ("status", "what is applied, for which profile, is it current", cmd_status),
        ("verify", "check installed files and host packages (exit 1: drift)", cmd_verify),
    ):
        p = sub.add_parser(name, help=text)
        _profile_arg(p)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        python_arg(p)
        _paths_args(p)
        p.set_defaults(func=func)

    p = sub.add_parser("reset", help="remove what kvenv installed (keeps the cache)")
    _profile_arg(p)
    p.add_argument("--yes", action="store_true", help="really remove")
    p.add_argument("--dry-run", action="store_true", help="show what would be removed")
    p.add_argument("--purge-cache", action="store_true", help="also remove the cache and store")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _paths_args(p)
    p.set_defaults(func=cmd_reset)


# -- inputs ------------------------------------------------------------------------------------


def _load(args: argparse.Namespace) -> tuple[LoadedProfile, Locations]:
    from kvenv.env.place import find_place  # the one resolver (docs/places.md)

    place = find_place(args.profile, root=args.root, cache=args.cache)
    loaded, locations = place.loaded, place.locations
    on_success = getattr(args, "on_success", None)
    if on_success is not None:  # recorded for the start-up paths once the command succeeded
        on_success.append(lambda: remember_profile(loaded, args))
    detail(f"profile {loaded.profile.name}: {loaded.path} ({loaded.origin})")
    detail(f"runtime root: {locations.root} (from {locations.root_from})")
    detail(f"cache: {locations.cache} (from {locations.cache_from})")
    return loaded, locations


def _owned(args: argparse.Namespace) -> tuple[LoadedProfile, Locations]:
    """:func:`_load`, refusing a runtime root that another profile owns."""
    from kvenv.env.root import check_owner, owner_of

    loaded, locations = _load(args)
    check_owner(locations.root, owner_of(loaded))
    return loaded, locations


def remember_profile(loaded: LoadedProfile, args: argparse.Namespace) -> None:
    """Record the facts of a profile that loaded, for the start-up paths that need only them
    (:mod:`kvenv.model.facts`); best effort, nothing when the record is already current."""
    from kvenv.model.facts import remember_facts

    remember_facts(loaded, args.profile, cache=getattr(args, "cache", None))


def host_python(args: argparse.Namespace, loaded: LoadedProfile) -> HostPython:
    """The host interpreter for this command: ``--python``, ``$KVENV_PYTHON``, the profile's
    ``[host] python``, the active environment, ``python3`` on PATH, else kvenv's own (with a
    note on stderr). The same rule for plan, apply, verify, status and doctor."""
    from kvenv.env.place import host_python_of

    host = host_python_of(loaded, getattr(args, "python", None))
    if host.note:
        err(f"note: {host.note}")
    return host


def judged_host(
    args: argparse.Namespace, loaded: LoadedProfile, recorded: str | None
) -> HostPython:
    """The host interpreter that a command judging the applied generation uses (``verify``,
    ``status``, ``doctor``): the one its manifest records (``recorded``) unless ``--python``
    names another (:func:`kvenv.probe.interpreter.judged_host_python`); its note on stderr."""
    from kvenv.env.place import host_python_of
    from kvenv.probe.interpreter import judged_host_python

    flag = getattr(args, "python", None)
    host = judged_host_python(host_python_of(loaded, flag), recorded, flag=flag is not None)
    if host.note:
        err(f"note: {host.note}")
    return host


def _memo(args: argparse.Namespace) -> Path:
    """The user's own cache directory, where memos go (:func:`kvenv.model.places.memo_root`):
    never a profile's ``[paths] cache``, so the pure commands write nothing there."""
    from kvenv.model.places import memo_root

    return memo_root(getattr(args, "cache", None))


def _host(
    snapshot: str | None,
    python: HostPython | None = None,
    cache: Path | None = None,
    recording: Recording | None = None,
) -> HostSnapshot:
    """The host snapshot: a file when given, else one probe of the host interpreter (in
    process only when it is kvenv's own; another interpreter's own facts are memoized under
    ``cache``, the user's memo directory, while its files are unchanged). With ``recording``,
    the live host's identity is kept there too (:mod:`kvenv.probe.hostmemo`)."""
    from pathlib import Path

    if snapshot:
        from kvenv.model.snapshot import read_snapshot

        return read_snapshot(Path(snapshot))
    from kvenv.probe.host import take_snapshot

    own = python is None or python.own
    memo = cache if cache is not None and not own else None
    if recording is not None:
        from kvenv.probe.host import watch_probe

        snap, recording.host = watch_probe(None if own or python is None else python.path, memo)
        return snap
    if own or python is None:
        return take_snapshot()
    return take_snapshot(python=python.path, memo=memo)


def _recorded(loaded: LoadedProfile) -> HostSnapshot | None:
    from kvenv.model.loading import recorded_host

    return recorded_host(loaded).snapshot


def _again(command: str, args: argparse.Namespace, name: str) -> str:
    """``kvenv COMMAND`` for this invocation's profile (else ``name``) and paths, as
    :func:`kvenv.cli.hints.fix_command` writes it."""
    from kvenv.cli.hints import fix_command

    if not args.profile:
        args = argparse.Namespace(**{**vars(args), "profile": name})
    return fix_command(args, command)


# -- plan --------------------------------------------------------------------------------------


def _plan_lines(plan: Plan, python: HostPython | None = None) -> list[str]:
    """What ``kvenv plan`` prints for ``plan``, line by line."""
    from kvenv.plan.make import plan_to_dict, same_as_host

    data = plan_to_dict(plan)
    lines = [f"profile: {plan.profile} ({plan.profile_digest})"]
    if python is not None:
        probed = plan.inputs.host.python.executable
        runs = f"; it runs {probed}" if probed and probed != python.path else ""
        lines.append(f"host python: {python.describe()}{runs}")
    lines.append(f"target: {plan.target}")
    lines.append(f"lock: {plan.lock_digest or 'none (no overlay)'}")
    lines.append(f"current generation: {plan.current_generation or 'none'}")
    lines.append("findings:")
    for f in data["findings"]:
        fix = f" (fix: {f['fix']})" if f.get("fix") and f["status"] != "pass" else ""
        lines.append(f"  {f['status'].upper():<8} {f['message']}{fix}")
    if not data["findings"]:
        lines.append("  (no target checks: the profile targets this host)")
    lines.append("steps:")
    for step in plan.steps:
        lines.append(f"  [{'done' if step.done else 'todo'}] {step.name}: {step.detail}")
    if plan.shadows:
        lines.append("overlay shadows these host packages:")
        for s in plan.shadows:
            host = s.host_version or "(version unknown)"
            lines.append(f"  {s.name}: host {host} -> {s.overlay_version}")
    same = same_as_host(plan)
    if same:
        lines.append(f"overlay also carries, at the host's own version: {', '.join(same)}")
    if plan.up_to_date:
        lines.append("up to date: the applied generation matches this profile and lock")
    lines.append(f"compatible: {'yes' if plan.compatible else 'no'}")
    return lines


def cmd_plan(args: argparse.Namespace) -> int:
    from kvenv.env import answers

    recalled = answers.recall_answer("plan", args)  # an answer kept below, still valid
    if recalled is not None:
        noted, known = recalled
        if noted is not None and noted.note:
            err(f"note: {noted.note}")
        return _print_plan(known)
    from kvenv.env.apply import plan_apply
    from kvenv.lock.input import profile_lock
    from kvenv.plan.make import plan_to_dict

    with answers.Recording("plan", args) as recording:  # what the full path reads
        loaded, locations = _load(args)
        python = None if args.host else host_python(args, loaded)  # --host SNAPSHOT wins
        host = _host(args.host, python, _memo(args), None if args.host else recording)
        plan = plan_apply(
            loaded, profile_lock(loaded), host, locations, strict=args.strict,
            recorded=_recorded(loaded),
        )  # fmt: skip
    answer: dict[str, Any] = {"code": EXIT_OK if plan.compatible else EXIT_CONFLICT}
    if args.json:
        answer["json"] = plan_to_dict(plan)
    else:
        answer["lines"] = _plan_lines(plan, python)
    recording.keep(locations, answer, python)
    return _print_plan(answer)


def _print_plan(answer: dict[str, Any]) -> int:
    if "json" in answer:
        emit_json(answer["json"])
    else:
        for line in answer["lines"]:
            out(line)
    return int(answer["code"])


# -- apply -------------------------------------------------------------------------------------


def _open_bundle(args: argparse.Namespace) -> BundleInfo:
    """Open and verify ``--from``'s bundle: hashed in full unless an earlier apply verified
    it and no file under it changed since (the memo's ``bundle`` records); --repair hashes
    every file."""
    from pathlib import Path

    from kvenv.env.answers import bundle_memo
    from kvenv.fetch.bundle import open_bundle

    return open_bundle(Path(args.bundle), memo_root=bundle_memo(args))


def cmd_apply(args: argparse.Namespace) -> int:
    import os

    from kvenv.env import answers
    from kvenv.env.keep import keep_count

    quick = not (args.dry_run or args.strict or args.json or args.repair)
    known = answers.recalled_bundle(args) if quick and args.bundle else None
    bundle = _open_bundle(args) if args.bundle and known is None else None
    if args.profile is None and args.bundle:
        args.profile = known or str(bundle.profile_path)  # type: ignore[union-attr]
    keep = keep_count(args.keep, os.environ)  # checked before any path, fast or full
    recalled = answers.recall_apply(args, err) if quick else None
    if recalled is not None:  # a no-op, or a new root's generation made again
        if recalled.python.note:
            err(f"note: {recalled.python.note}")
        if recalled.built is None:
            return _up_to_date(recalled.value["generation"], recalled.root)
        for line in recalled.value["findings"]:
            err(line)
        _report_applied(
            args, recalled.name, recalled.built.generation, recalled.python,
            str(recalled.built.manifest_path), recalled.value["notes"], recalled.value["warnings"],
        )  # fmt: skip
        return EXIT_OK
    if args.bundle and bundle is None:
        bundle = _open_bundle(args)  # the full path installs from it: open it now
    with answers.Recording("apply", args) as recording:  # what the full path reads
        loaded, locations = _load(args)
        python = host_python(args, loaded)  # probed (and read) at most once, fast or full
        new_root = quick and not os.path.lexists(locations.root)
        host = functools.cache(lambda: _host(None, python, _memo(args), recording))
        recorded = functools.cache(lambda: _recorded(loaded))
        if quick:  # a bundle, already checked above, may be a no-op too
            from kvenv.env.apply import noop_fast

            done = noop_fast(loaded, locations, host, recorded, keep=keep)
            if done is not None:
                recording.keep(locations, {"generation": done[0]}, python)
                return _up_to_date(done[0], locations.root)
        full = _apply_full(args, loaded, locations, python, host(), recorded(), bundle, keep)
    if full is None:
        return EXIT_OK
    findings, result = full
    if result.status == "up-to-date":
        return _up_to_date(result.generation, result.root)
    assert result.generation is not None and result.manifest is not None
    _report_applied(
        args, loaded.profile.name, result.generation, python, result.manifest, result.notes,
        result.warnings,
    )  # fmt: skip
    if new_root:  # what a next new root may replay (kvenv.env.recall), once this succeeded
        recording.keep_generation(loaded, locations, result, findings, python)
    return EXIT_OK


def _up_to_date(generation: object, root: object) -> int:
    out(f"already up to date: generation {generation} in {root}; nothing to do")
    return EXIT_OK


def _apply_full(
    args: argparse.Namespace,
    loaded: LoadedProfile,
    locations: Locations,
    python: HostPython,
    host: HostSnapshot,
    recorded: HostSnapshot | None,
    bundle: BundleInfo | None,
    keep: int,
) -> tuple[list[str], ApplyResult] | None:
    """Plan and apply in full; the plan's warnings printed and returned with the result,
    or None when all was printed (``--json``, ``--dry-run``)."""
    from kvenv.env.apply import ApplyOptions, apply, plan_apply
    from kvenv.lock.input import profile_lock

    plan = plan_apply(
        loaded, profile_lock(loaded), host, locations, strict=args.strict, recorded=recorded,
        repair=args.repair,
    )  # fmt: skip
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    progress = TerminalProgress("fetching", enabled=on_terminal and not args.json)
    options = ApplyOptions(
        offline=args.offline or bundle is not None,
        bundle=bundle,
        dry_run=args.dry_run,
        wait=not args.no_wait,
        jobs=args.jobs,
        progress=progress if progress.enabled else None,  # no call per unpacked file for nothing
        on_wait=err,
        repair=args.repair,
        keep=keep,
        compile=not args.no_compile,
    )
    try:
        result = apply(plan, options)
    except OSError as exc:
        from kvenv.env.root import unusable_dir_error

        raise unusable_dir_error(exc, locations) or exc from None
    finally:
        progress.close()
    if args.json:
        from kvenv.plan.make import plan_to_dict

        emit_json(
            {
                "status": result.status,
                "root": result.root,
                "generation": result.generation,
                "manifest": result.manifest,
                "removed_generations": result.removed,
                "notes": result.notes,
                "warnings": result.warnings,
                "plan": plan_to_dict(result.plan),
            }
        )
        return None
    if result.status == "dry-run":
        for line in _plan_lines(result.plan, python):
            out(line)
        out("dry-run: nothing was downloaded, installed or changed")
        return None
    findings = [  # every plan warning, as `kvenv plan` shows them
        f"warning: {finding.message}" + (f" (fix: {finding.fix})" if finding.fix else "")
        for finding in result.plan.findings
        if finding.status == "warning"
    ]
    for line in findings:
        err(line)
    return findings, result


def _report_applied(
    args: argparse.Namespace,
    name: str,
    generation: str,
    python: HostPython,
    manifest: str,
    notes: list[str],
    warnings: list[str],
) -> None:
    """What an apply that built ``generation`` prints (the full path and its recall alike)."""
    out(f"applied {name}: generation {generation}")
    out(f"host python: {python.describe()}")
    out(f"manifest: {manifest}")
    for note in notes:
        out(f"note: {note}")
    for warning in warnings:
        err(f"warning: {warning}")
    out(f'activate with: eval "$({_again("activate", args, name)})"')


# -- activate ----------------------------------------------------------------------------------


def cmd_activate(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from kvenv.env.runenv import chosen_shell
    from kvenv.env.shellrender import render

    shell = chosen_shell(args.shell, os.environ)
    if args.undo:
        from kvenv.env.shellrender import render_deactivate

        sys.stdout.write(render_deactivate(shell))
        return EXIT_OK
    if not args.manifest:
        activation, path = applied(args)
    else:
        from kvenv.env.activation import activation_for
        from kvenv.env.manifest import read_manifest
        from kvenv.env.root import check_manifest_file

        path = Path(args.manifest)
        check_manifest_file(path.absolute())
        activation = activation_for(read_manifest(path))
    sys.stdout.write(render(activation, shell, manifest_path=str(path)))
    return EXIT_OK


def applied(args: argparse.Namespace) -> tuple[ActivationView, Path]:
    """The activation of the generation applied for the command line's profile (its root's
    owner checked), and its manifest's path: what ``activate``, ``run`` and ``shell`` use."""
    import os

    if getattr(args, "verbosity", 0) <= 0:
        # the start-up path (issue 13): the same activation without the model, or None
        from kvenv.env.runenv import quick_activation

        quick = quick_activation(args.profile, root=args.root, cache=args.cache, environ=os.environ)
        if quick is not None:
            return quick
    from kvenv.env.runenv import applied_activation

    loaded, locations = _owned(args)
    on_success = getattr(args, "on_success", None)  # the record the start-up path reads
    return applied_activation(locations, loaded.profile.name, None, on_success)


# -- status and verify -------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from kvenv.env import answers

    recalled = answers.recall_answer("status", args)  # an answer kept below, still valid
    if recalled is not None:
        python, data = recalled
        assert python is not None
        return _print_status(args, data, python)  # says the host's note, as the full path
    from kvenv.env.applied import root_status

    with answers.Recording("status", args) as recording:  # what the full path reads
        loaded, locations = _load(args)
        data = root_status(loaded, locations)
    recording.keep(locations, dict(data))  # before the host python is added to it
    from kvenv.env.place import host_python_of

    python = host_python_of(loaded, args.python)  # what plan and apply would use
    return _print_status(args, data, python)


def _print_status(args: argparse.Namespace, data: dict[str, Any], python: HostPython) -> int:
    """Print the status ``data``; ``python`` is the interpreter a plain ``plan``/``apply``
    with these flags uses (``current`` says what they would say), the one shown is the one
    the current generation records (:func:`kvenv.probe.interpreter.judged_host_python`)."""
    from kvenv.probe.interpreter import judged_host_python

    recorded = data.get("python")
    judged = judged_host_python(python, recorded, flag=args.python is not None)
    if judged.note:
        err(f"note: {judged.note}")
    data["host_python"] = {"path": judged.path, "source": judged.source}
    rebuilds = bool(data["current"]) and recorded is not None and python.path != recorded
    if rebuilds:  # made for another interpreter: plan and apply would rebuild it for python
        data["current"] = False
    if args.json:
        emit_json(data)
        return EXIT_OK
    out(f"profile: {data['profile']}")
    out(f"root: {data['root']}")
    if data.get("owned") is False:
        owner = data["owner"]
        out(
            f"owner: the root belongs to profile {owner['name']!r} "
            f"({owner['file'] or 'built-in'}), not to this one"
        )
    out(f"host python: {judged.describe()}")
    if not data["applied"]:
        from kvenv.cli.hints import fix_command
        from kvenv.env.placecheck import system_dir

        what = system_dir(data["root"])
        if what is not None:  # `apply` refuses it: never suggest it
            out(f"applied: nothing ({data['root']} is {what}: it can never be a runtime root;")
            out("  give --root DIR, a directory of its own)")
        else:
            out(f"applied: nothing (run `{fix_command(args, 'apply')}`)")
        return EXIT_OK
    out(f"generation: {data['generation']} (applied {data['applied_at']})")
    out(f"distributions: {data['distributions']}")
    if data["current"]:
        state = "yes"
    elif rebuilds:
        state = (
            f"no: applied for {recorded}; `kvenv apply` would rebuild it for "
            f"{python.describe()} (give --python {recorded} to keep it)"
        )
    elif data.get("lock_problem"):  # not locked (or unreadable): what apply would refuse
        from kvenv.cli.hints import fix_command

        state = f"no: {data['lock_problem']}; make it with `{fix_command(args, 'lock')}`"
    else:
        state = "no: profile, lock or native wheel changed; run apply"
    out(f"current: {state}")
    return EXIT_OK


def _drift_row(drift: Any) -> dict[str, str]:
    return {"kind": drift.kind, "path": drift.path, "message": drift.message}


def cmd_verify(args: argparse.Namespace) -> int:
    from kvenv.cli.hints import fix_command
    from kvenv.env.integrity import state_damage
    from kvenv.env.root import is_owned
    from kvenv.env.verify import Drift, drift_error, shadowed, verify, verify_activation
    from kvenv.errors import InputError

    loaded, locations = _owned(args)
    manifest, damage = state_damage(locations) if is_owned(locations.root) else (None, [])
    repair = fix_command(args, "apply", "--repair")
    if damage:  # the state files themselves: nothing else can be trusted
        drifts = [Drift(d.kind, d.path, d.message) for d in damage]
        if args.json:
            emit_json(
                {
                    "generation": None,
                    "ok": False,
                    "drift": [_drift_row(d) for d in drifts],
                    "repair": repair,
                }
            )
            return EXIT_CHECK_FAILED
        raise drift_error(drifts, repair)
    if manifest is None:
        raise InputError(
            f"nothing is applied for profile {loaded.profile.name} in {locations.root}",
            hint="run `{kvenv apply}` first",
        )
    python = judged_host(args, loaded, manifest.python)
    host = _host(None, python, _memo(args))
    drifts = verify(manifest, host, locations=locations)
    if manifest.python is not None and python.path != manifest.python and not args.python:
        drifts.insert(0, Drift(
            "host", manifest.python,
            f"the host interpreter the generation was applied for is gone: {manifest.python}",
        ))  # fmt: skip
    drifts += verify_activation(manifest, loaded, host)
    if args.json:
        emit_json(
            {
                "generation": manifest.generation,
                "host_python": {"path": python.path, "source": python.source},
                "ok": not drifts,
                "drift": [_drift_row(d) for d in drifts],
                "shadowed": shadowed(manifest),
            }
        )
        return EXIT_CHECK_FAILED if drifts else EXIT_OK
    if drifts:
        raise drift_error(drifts, repair)
    files = sum(1 for _ in manifest.distributions)
    out(f"verified generation {manifest.generation}: {files} distributions match their RECORD")
    out(f"protected host packages unchanged in {python.describe()}")
    for line in shadowed(manifest):
        out(f"note: {line}")
    return EXIT_OK


# -- reset -------------------------------------------------------------------------------------


def cmd_reset(args: argparse.Namespace) -> int:
    from kvenv.env.reset import execute_reset, plan_reset
    from kvenv.errors import UsageError

    loaded, locations = _load(args)
    plan = plan_reset(locations, purge_cache=args.purge_cache, given_root=_given_root(args, loaded))
    rows = [
        {"label": t.label, "path": t.path, "action": t.action, "reason": t.reason}
        for t in plan.targets
    ]
    kept = [t.path for t in plan.kept]
    if args.dry_run or not args.yes:
        if args.json and args.dry_run:
            emit_json(
                {"root": plan.root, "dry_run": True, "targets": rows, "removed": [], "kept": kept}
            )
        elif not args.json:  # with --json and no --yes, one JSON document: the error alone
            for row in rows:
                out(f"{row['action']:<8} {row['path']}  ({row['reason']})")
        if not args.dry_run:
            raise UsageError(
                "reset requires --yes",
                hint="inspect it first with `kvenv reset --dry-run`, then add --yes",
            )
        if not args.json:
            out("dry-run: nothing was removed")
        return EXIT_OK
    removed = execute_reset(plan, locations, on_wait=err)
    if args.json:
        emit_json(
            {"root": plan.root, "dry_run": False, "targets": rows, "removed": removed, "kept": kept}
        )
        return EXIT_OK
    for path in removed:
        out(f"removed {path}")
    for target in plan.kept:
        out(f"kept {target.path}  ({target.reason})")
    if not removed:
        out(f"nothing to remove: nothing is applied in {plan.root}")
    elif kept:
        out(f"reset complete; {plan.root} stays: it holds what kvenv did not make (kept above)")
    else:
        out("reset complete")
    if args.purge_cache:
        return EXIT_OK
    if plan.cache_kept:
        out(f"cache preserved: {plan.cache} (remove it with --purge-cache)")
    return EXIT_OK


def _given_root(args: argparse.Namespace, loaded: LoadedProfile) -> str | None:
    """The runtime root as the user wrote it (``--root``, ``$KVENV_ROOT``, the profile's
    ``[paths] root``), before it was made canonical; None for the default root."""
    import os

    from kvenv.model.places import ENV_ROOT

    if args.root is not None:
        return str(args.root)
    if os.environ.get(ENV_ROOT):
        return os.environ[ENV_ROOT]
    return loaded.profile.paths.root
