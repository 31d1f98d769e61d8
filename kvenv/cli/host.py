"""Host commands: ``fingerprint``, ``init``, ``doctor``, ``verify-gpus``, ``verify-wheel`` and
``stage-wheel``.

Exit codes: 0 ok / compatible / PASS; 1 doctor incompatible or verify-gpus FAIL; 2 bad input
(unreadable profile or snapshot, malformed or mismatched sha256, a non-empty staging target).
Nothing heavy at module level: probes and installers are imported by the command that runs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvenv.cli._io import emit_json, err, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_OK

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvenv.model.loading import LoadedProfile
    from kvenv.model.snapshot import HostSnapshot
    from kvenv.probe.doctor import DoctorReport

_LABEL = {"pass": "PASS", "warning": "WARN", "error": "ERROR", "untested": "UNTESTED"}


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser("fingerprint", help="snapshot this host (Python, packages, torch, GPUs)")
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    p.add_argument("--save", metavar="PATH", help="also write it as a host snapshot file")
    p.add_argument(
        "--import-torch",
        action="store_true",
        help="also import torch (in a child process) for CUDA availability, devices and NCCL",
    )
    p.add_argument("--python", metavar="EXE", help="probe this interpreter instead of kvenv's")
    p.set_defaults(func=cmd_fingerprint)

    p = sub.add_parser("init", help="write a starter profile profiles/NAME.toml (never overwrites)")
    p.add_argument("name", metavar="NAME", help="profile name (lowercase, digits, . _ -)")
    p.add_argument("--extends", metavar="PROFILE", help="a profile to inherit everything else from")
    p.add_argument(
        "--from-host",
        action="store_true",
        help="describe this host as the target and save its snapshot beside the profile",
    )
    p.add_argument("--dir", metavar="DIR", default=".", help="project directory (default: .)")
    p.add_argument("--python", metavar="EXE", help="with --from-host: the interpreter to probe")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("doctor", help="check a host against a profile (exit 0 ok, 1 not)")
    p.add_argument("profile", nargs="?", metavar="PROFILE", help="name or .toml path")
    p.add_argument("--strict", action="store_true", help="warnings count as errors")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--host", metavar="SNAPSHOT", help="check this snapshot instead of probing")
    p.add_argument("--import-torch", action="store_true", help="probe with torch imported")
    p.add_argument(
        "--python",
        metavar="EXE",
        help="the host interpreter (default: $KVENV_PYTHON, [host] python, the active "
        "environment, python3 on PATH)",
    )
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("verify-gpus", help="can the visible GPUs run this tensor-parallel size?")
    p.add_argument("--tensor-parallel-size", type=_positive, metavar="N", help="TP degree")
    p.add_argument("--profile", metavar="PROFILE", help="also match its GPU model and SM")
    p.add_argument("--host", metavar="SNAPSHOT", help="use this snapshot's GPUs")
    p.add_argument("--json", action="store_true", help="machine-readable verdict")
    p.set_defaults(func=cmd_verify_gpus)

    p = sub.add_parser("verify-wheel", help="check a wheel's contents; print its sha256")
    p.add_argument("path", metavar="PATH", help="the .whl file")
    p.add_argument("--sha256", metavar="H", help="expected digest (exit 2 on a mismatch)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=cmd_verify_wheel)

    p = sub.add_parser("stage-wheel", help="install one wheel, no dependencies, into an empty dir")
    p.add_argument("path", metavar="PATH", help="the .whl file")
    p.add_argument("--target", required=True, metavar="DIR", help="absent or empty directory")
    p.add_argument("--sha256", metavar="H", help="expected digest, checked before installing")
    p.set_defaults(func=cmd_stage_wheel)


# fingerprint ---------------------------------------------------------------------------------


def _or_missing(value: object) -> str:
    return str(value) if value not in (None, "", []) else "NOT FOUND"


def _describe_snapshot(snap: HostSnapshot) -> None:
    py = snap.python
    out(f"host snapshot ({snap.source}{', ' + snap.taken_at if snap.taken_at else ''})")
    out(f"python:    {py.version} {py.implementation} {py.abi or '?'} ({py.executable})")
    out(f"           {len(py.tags)} wheel tags, {len(py.sys_path)} sys.path entries")
    plat = snap.platform
    libc = f"{plat.libc} {plat.libc_version}" if plat.libc else "libc NOT FOUND"
    out(f"platform:  {plat.os} {plat.machine}, {libc}, kernel {_or_missing(plat.kernel)}")
    out(f"packages:  {len(snap.distributions)} distributions")
    torch = snap.torch
    if torch is None:
        out("torch:     NOT FOUND")
    else:
        cuda = f"CUDA {torch.cuda}" if torch.cuda else "CPU-only"
        out(f"torch:     {_or_missing(torch.version)} ({cuda}) at {_or_missing(torch.location)}")
        if torch.cuda_available is not None:
            out(
                f"           cuda_available={torch.cuda_available} "
                f"devices={torch.device_count} nccl={_or_missing(torch.nccl)}"
            )
    driver = snap.driver
    if driver is None:
        out("driver:    NOT FOUND")
    else:
        out(
            f"driver:    {_or_missing(driver.version)} (CUDA up to {_or_missing(driver.cuda_max)};"
            f" from {driver.source})"
        )
    if not snap.gpus:
        out("GPUs:      none visible")
    for gpu in snap.gpus:
        out(
            f"GPU {gpu.index}:     {gpu.name}, compute capability "
            f"{_or_missing(gpu.compute_capability)}, {_or_missing(gpu.memory_mib)} MiB"
        )
    cuda_info = snap.cuda
    if cuda_info is not None:
        out(
            f"CUDA:      toolkit {_or_missing(cuda_info.toolkit_version)} at "
            f"{_or_missing(cuda_info.home)}; libcuda {_or_missing(cuda_info.libcuda)}"
        )
    out(f"Kaggle:    {'yes' if snap.is_kaggle else 'no'}")
    for note in snap.notes:
        out(f"note: {note}")


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from kvenv.model.snapshot import snapshot_to_dict, write_snapshot
    from kvenv.probe.host import take_snapshot

    snap = take_snapshot(import_torch=args.import_torch, python=args.python)
    if args.save:
        write_snapshot(Path(args.save), snap)
    if args.json:
        emit_json(snapshot_to_dict(snap))
    else:
        _describe_snapshot(snap)
    if args.save:
        err(f"saved: {args.save}")
    return EXIT_OK


# init ----------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from kvenv.errors import UsageError
    from kvenv.model.init import init_profile

    if args.python and not args.from_host:
        raise UsageError("--python is only meaningful with --from-host")
    host: Callable[[], HostSnapshot] | None = None
    if args.from_host:
        from kvenv.probe.host import take_snapshot

        host = functools.partial(take_snapshot, python=args.python)
    result = init_profile(
        args.name,
        Path(args.dir),
        extends=args.extends,
        host=host,
        today=datetime.date.today().isoformat(),
    )
    out(f"wrote {result.profile}")
    if result.snapshot is not None:
        out(f"wrote {result.snapshot}")
    out(f"next: kvenv validate {result.profile}  and  kvenv doctor {result.profile}")
    return EXIT_OK


# doctor --------------------------------------------------------------------------------------


def _load_host(
    host: str | None, *, import_torch: bool = False, python: str | None = None
) -> tuple[HostSnapshot, str]:
    from kvenv.model.snapshot import read_snapshot

    if host:
        return read_snapshot(Path(host)), host
    from kvenv.probe.host import take_snapshot

    return take_snapshot(import_torch=import_torch, python=python), "live probe"


def _evaluator(loaded: LoadedProfile) -> Any:
    if loaded.profile.target is None:
        return None
    from kvenv.model.target import TargetEnv

    return TargetEnv.from_profile_target(loaded.profile.target).evaluate


def _print_finding(status: str, message: str, fix: str | None) -> None:
    out(f"{_LABEL[status]:<9}{message}")
    if fix and status != "pass":
        out(f"{'':<9}fix: {fix}")


def _print_report(report: DoctorReport, loaded: LoadedProfile, notes: list[str]) -> None:
    out(f"kvenv doctor: profile {report.profile} ({loaded.path})")
    out(f"host: {report.host_source}")
    for note in notes:
        out(f"note: {note}")
    if not report.findings:
        out("the profile has no [target]: nothing to check on the host")
    for finding in report.findings:
        _print_finding(finding.status, finding.message, finding.fix)
    out(f"overlay: {report.overlay_note}")
    for dep in report.dependencies or ():
        _print_finding(dep.status, dep.message, dep.fix)
    summary = report.summary()
    counts = {k: summary["host"][k] + summary["dependencies"][k] for k in summary["host"]}
    out("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if report.compatible:
        out(f"COMPATIBLE: this host matches profile {report.profile}")
    else:
        errors = counts["error"]
        hint = "" if report.strict else " (warnings do not count; --strict makes them errors)"
        out(f"NOT COMPATIBLE: {errors} error(s) against profile {report.profile}{hint}")


def cmd_doctor(args: argparse.Namespace) -> int:
    from kvenv.env.applied import applied_state
    from kvenv.model.loading import load_profile, recorded_host
    from kvenv.probe.doctor import diagnose

    loaded = load_profile(args.profile)
    if args.host:
        host, source = _load_host(args.host)
    else:  # the host interpreter, resolved as plan, apply and verify resolve it
        from kvenv.cli.apply import host_python

        python = host_python(args, loaded)
        host, _ = _load_host(
            None, import_torch=args.import_torch, python=None if python.own else python.path
        )
        source = f"live probe of {python.describe()}"
    recorded = recorded_host(loaded)
    applied = applied_state(loaded)
    report = diagnose(
        loaded.profile,
        host,
        host_source=source,
        strict=args.strict,
        recorded=recorded.snapshot,
        overlay=applied.overlay,
        overlay_note=applied.note,
        evaluate=_evaluator(loaded),
    )
    if applied.findings:
        import attrs

        report = attrs.evolve(
            report, dependencies=(*(report.dependencies or ()), *applied.findings)
        )
    notes = [recorded.missing] if recorded.missing else []
    notes += [f"snapshot: {n}" for n in host.notes] if args.host is None else []
    if args.json:
        data = report.to_json()
        data["notes"] = notes
        emit_json(data)
    else:
        _print_report(report, loaded, notes)
    return EXIT_OK if report.compatible else EXIT_CHECK_FAILED


# verify-gpus ---------------------------------------------------------------------------------


def cmd_verify_gpus(args: argparse.Namespace) -> int:
    from kvenv.errors import UsageError
    from kvenv.probe.checks import check_tensor_parallel

    loaded = None
    if args.profile:
        from kvenv.model.loading import load_profile

        loaded = load_profile(args.profile)
    tp = args.tensor_parallel_size
    if tp is None and loaded is not None:
        tp = loaded.profile.runtime.tensor_parallel_size
    if tp is None:
        raise UsageError(
            "--tensor-parallel-size is required",
            hint="give N, or a --profile whose [runtime] sets tensor_parallel_size",
        )
    notes: list[str] = []
    if args.host:
        from kvenv.model.snapshot import read_snapshot

        snap = read_snapshot(Path(args.host))
        gpus, driver = list(snap.gpus), snap.driver
    else:
        from kvenv.probe.effects import live
        from kvenv.probe.nvidia import probe_gpus

        probe = probe_gpus(live())
        gpus, driver, notes = list(probe.gpus), probe.driver, list(probe.notes)
    target = loaded.profile.target if loaded else None
    finding = check_tensor_parallel(gpus, tp, target.gpu if target else None, driver)
    verdict = "PASS" if finding.status == "pass" else "FAIL"
    if args.json:
        emit_json(
            {
                "verdict": verdict,
                "tensor_parallel_size": tp,
                "message": finding.message,
                "fix": finding.fix,
                "gpus": [
                    {
                        "index": g.index,
                        "name": g.name,
                        "compute_capability": g.compute_capability,
                        "memory_mib": g.memory_mib,
                    }
                    for g in gpus
                ],
                "notes": notes,
            }
        )
    else:
        out(f"{verdict}: {finding.message}")
        if finding.fix and verdict == "FAIL":
            out(f"fix: {finding.fix}")
        for note in notes:
            out(f"note: {note}")
    return EXIT_OK if verdict == "PASS" else EXIT_CHECK_FAILED


# verify-wheel, stage-wheel -------------------------------------------------------------------


def cmd_verify_wheel(args: argparse.Namespace) -> int:
    from kvenv.env.stage import verify_wheel

    check = verify_wheel(Path(args.path), args.sha256)
    if args.json:
        emit_json(check.to_json())
        return EXIT_OK if check.ok else EXIT_CHECK_FAILED
    if not check.ok:
        from kvenv.errors import CheckFailed, Problem

        raise CheckFailed(
            f"not a sound wheel: {check.path}: {len(check.problems)} problem(s)",
            problems=[Problem(p, file=str(check.path)) for p in check.problems],
            hint="the wheel is damaged or was altered after it was built: download or build "
            "it again",
        )
    out(f"{check.sha256}  {check.path.name}")
    return EXIT_OK


def cmd_stage_wheel(args: argparse.Namespace) -> int:
    from kvenv.env.stage import stage_wheel

    target = Path(args.target)
    check, dist_info = stage_wheel(Path(args.path), target, expected=args.sha256)
    out(f"{check.sha256}  {check.path.name}")
    out(f"staged without dependencies: {target} ({dist_info})")
    return EXIT_OK
