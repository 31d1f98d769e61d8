"""Host commands: ``fingerprint``, ``init``, ``doctor``, ``verify-gpus``, ``verify-wheel`` and
``stage-wheel``.

Exit codes: 0 ok / compatible / PASS; 1 doctor incompatible, verify-gpus FAIL, verify-wheel
unsound or not the ``--sha256`` given; 2 bad input (unreadable profile or snapshot, a malformed
sha256, a mismatched sha256 for stage-wheel, a non-empty staging target).
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
    from kvenv.probe.drift import DriftContext

_LABEL = {"pass": "PASS", "warning": "WARN", "error": "ERROR", "untested": "UNTESTED"}


def register(sub: Any) -> None:
    from kvenv.cli.options import positive_value

    p = sub.add_parser("fingerprint", help="snapshot this host (Python, packages, torch, GPUs)")
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    p.add_argument("--save", metavar="PATH", help="also write it as a host snapshot file")
    p.add_argument(
        "--import-torch",
        action="store_true",
        help="also import torch (in a child process) for CUDA availability, devices and NCCL",
    )
    p.add_argument("--python", metavar="EXE", help="probe this interpreter instead of kvenv's")
    _listing_args(p)
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
    p.add_argument(
        "--python",
        metavar="EXE",
        help="with --from-host: the interpreter to probe, recorded as [host] python",
    )
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
    p.add_argument("--tensor-parallel-size", type=positive_value, metavar="N", help="TP degree")
    p.add_argument("--profile", metavar="PROFILE", help="also match its GPU model and SM")
    p.add_argument("--host", metavar="SNAPSHOT", help="use this snapshot's GPUs")
    p.add_argument("--json", action="store_true", help="machine-readable verdict")
    p.set_defaults(func=cmd_verify_gpus)

    p = sub.add_parser("verify-wheel", help="check a wheel's contents; print its sha256")
    p.add_argument("path", metavar="PATH", help="the .whl file")
    p.add_argument("--sha256", metavar="H", help="expected digest (exit 1 on a mismatch)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=cmd_verify_wheel)

    p = sub.add_parser("stage-wheel", help="install one wheel, no dependencies, into an empty dir")
    p.add_argument("path", metavar="PATH", help="the .whl file")
    p.add_argument("--target", required=True, metavar="DIR", help="absent or empty directory")
    p.add_argument("--sha256", metavar="H", help="expected digest, checked before installing")
    p.set_defaults(func=cmd_stage_wheel)


# fingerprint ---------------------------------------------------------------------------------


class _Layer(argparse.Action):
    """``--from-freeze``/``--reinstall-from``: (reinstall?, FILE) in command-line order."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        layers = list(getattr(namespace, self.dest, None) or [])
        layers.append((option == "--reinstall-from", str(values)))
        setattr(namespace, self.dest, layers)


def _listing_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "a host kvenv cannot run on (docs/hosts.md)",
        "--from-freeze writes a snapshot from package listings instead of probing",
    )
    g.add_argument(
        "--from-freeze",
        action=_Layer,
        dest="layers",
        metavar="FILE",
        help="`pip freeze` output or a requirements file; repeat to layer lists installed "
        "over a base, in order",
    )
    g.add_argument(
        "--reinstall-from",
        action=_Layer,
        dest="layers",
        metavar="FILE",
        help="a list installed over the ones before with --force-reinstall (its ranges make "
        "the version unknown)",
    )
    g.add_argument("--uninstall", action="append", metavar="NAME", help="removed after the lists")
    g.add_argument("--measured", metavar="SNAPSHOT", help="facts measured on the host; they win")
    g.add_argument("--python-version", metavar="X.Y.Z", help="the host's Python, e.g. 3.12.13")
    g.add_argument("--os", metavar="OS", help="linux (default), darwin or windows")
    g.add_argument("--machine", metavar="ARCH", help="x86_64 (default), aarch64, ...")
    g.add_argument("--glibc", metavar="X.Y", help="the host's glibc, e.g. 2.35")
    g.add_argument("--kernel", metavar="RELEASE", help="the host's kernel release")
    g.add_argument("--cuda", metavar="X.Y[.Z]", help="the CUDA toolkit, e.g. 12.8.93")
    g.add_argument("--driver", metavar="VERSION", help="the NVIDIA driver, e.g. 580.159.04")
    g.add_argument("--driver-cuda", metavar="X.Y", help="the newest CUDA the driver supports")
    g.add_argument("--nccl", metavar="VERSION", help="torch's NCCL, e.g. 2.27.5")
    g.add_argument(
        "--gpu",
        action="append",
        metavar="NAME[,SM[,MIB]]",
        help="one visible GPU, e.g. 'Tesla T4,7.5,15360'; repeat per GPU",
    )
    g.add_argument("--kaggle", action="store_true", default=None, help="the host is Kaggle")
    g.add_argument("--taken-at", metavar="DATE", help="when the listing was taken")
    g.add_argument("--note", action="append", metavar="TEXT", help="a note kept in the snapshot")
    d = p.add_argument_group("differences")
    d.add_argument(
        "--diff",
        metavar="SNAPSHOT",
        help="print how this host (or --host) differs from SNAPSHOT; exit 1 when it does",
    )
    d.add_argument("--host", metavar="SNAPSHOT", help="with --diff: compare this snapshot")


_ONLY_WITH_FREEZE = (
    "uninstall",
    "measured",
    "python_version",
    "os",
    "machine",
    "glibc",
    "kernel",
    "cuda",
    "driver",
    "driver_cuda",
    "nccl",
    "gpu",
    "kaggle",
    "taken_at",
    "note",
)


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
    cpu = snap.cpu
    if cpu is not None:
        level = f", {cpu.level}" if cpu.level else ""
        features = " ".join(cpu.features) or "no tracked features"
        out(f"CPU:       {cpu.model or cpu.arch}{level}; {features}")
    libraries = snap.libraries
    if libraries is not None:
        system = "not read" if libraries.system is None else str(len(libraries.system))
        shipped = sum(len(files) for files in libraries.packages.values())
        out(f"libraries: {system} in the loader's cache, {shipped} from torch/nvidia-* packages")
    out(f"Kaggle:    {'yes' if snap.is_kaggle else 'no'}")
    for note in snap.notes:
        out(f"note: {note}")


def _read_listing(path: str) -> str:
    from kvenv.errors import InputError

    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"package listing not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the package listing {path}: {exc}") from None


def _from_listing(args: argparse.Namespace) -> HostSnapshot:
    import attrs

    from kvenv.errors import UsageError
    from kvenv.model.snapshot import read_snapshot
    from kvenv.probe import freeze

    measured = read_snapshot(Path(args.measured)) if args.measured else None
    facts = freeze.HostFacts(
        python_version=args.python_version,
        os=args.os,
        machine=args.machine,
        glibc=args.glibc,
        kernel=args.kernel,
        cuda=args.cuda,
        driver=args.driver,
        driver_cuda=args.driver_cuda,
        nccl=args.nccl,
        gpus=tuple(freeze.parse_gpu(g, i) for i, g in enumerate(args.gpu or ())),
        is_kaggle=args.kaggle,
        taken_at=args.taken_at,
        notes=tuple(args.note or ()),
    )
    version = args.python_version or (measured.python.version if measured else None)
    env = None
    if version is not None:
        mp = measured.platform if measured else None
        env = freeze.marker_environment(
            version,
            args.os or (mp.os if mp else "linux"),
            args.machine or (mp.machine if mp else "x86_64"),
        )
    listings = [
        attrs.evolve(
            freeze.parse_listing(_read_listing(f), file=Path(f).name, marker_env=env),
            reinstall=reinstall,
        )
        for reinstall, f in args.layers
    ]
    if listings[0].reinstall:
        raise UsageError("the first listing is the base: give it with --from-freeze")
    dists, notes = freeze.layer_listings(listings, uninstall=args.uninstall or ())
    sources = [Path(f).name for _, f in args.layers]
    return freeze.snapshot_from_listing(
        dists, facts, sources=sources, measured=measured, notes=notes
    )


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from kvenv.errors import UsageError
    from kvenv.model.snapshot import snapshot_to_dict, write_snapshot

    if args.diff:
        return _diff(args)
    if args.host:
        raise UsageError("--host is only meaningful with --diff")
    if args.layers:
        if args.python or args.import_torch:
            raise UsageError("--python and --import-torch probe a host; --from-freeze does not")
        snap = _from_listing(args)
    else:
        given = [f"--{n.replace('_', '-')}" for n in _ONLY_WITH_FREEZE if getattr(args, n)]
        if given:
            raise UsageError(f"{', '.join(given)}: only meaningful with --from-freeze")
        snap, _ = _load_host(None, import_torch=args.import_torch, python=args.python)
    if args.save:
        write_snapshot(Path(args.save), snap)
    if args.json:
        emit_json(snapshot_to_dict(snap))
    else:
        _describe_snapshot(snap)
    if args.save:
        err(f"saved: {args.save}")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from kvenv.model.snapshot import read_snapshot
    from kvenv.probe.drift import host_changes

    if args.layers or args.save:
        from kvenv.errors import UsageError

        raise UsageError("--diff compares snapshots; it writes none (drop --from-freeze/--save)")
    recorded = read_snapshot(Path(args.diff))
    live, source = _load_host(args.host, import_torch=args.import_torch, python=args.python)
    changes = host_changes(recorded, live)
    if args.json:
        emit_json(
            {
                "snapshot": args.diff,
                "host": source,
                "same": not changes,
                "changes": [c.to_json() for c in changes],
            }
        )
        return EXIT_CHECK_FAILED if changes else EXIT_OK
    out(f"{source} against {args.diff}:")
    facts = [c for c in changes if c.kind != "package"]
    for change in facts:
        out(f"  {change.describe()}")
    packages = [c for c in changes if c.kind == "package"]
    if packages:
        added = sum(1 for c in packages if c.recorded is None)
        removed = sum(1 for c in packages if c.live is None)
        out(
            f"  distributions: {len(packages) - added - removed} changed, {added} added, "
            f"{removed} removed"
        )
        for change in packages:
            out(f"    {change.describe()}")
    if not changes:
        out("  no differences (versions unknown on either side are not differences)")
    return EXIT_CHECK_FAILED if changes else EXIT_OK


# init ----------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from kvenv.errors import UsageError
    from kvenv.model.init import init_profile

    if args.python and not args.from_host:
        raise UsageError("--python is only meaningful with --from-host")
    host: Callable[[], HostSnapshot] | None = None
    python: str | None = None
    if args.from_host:
        from kvenv.probe.host import take_snapshot

        if args.python is not None:
            from kvenv.probe.interpreter import resolve_host_python

            # The same rule every command uses (a bare name is looked up on PATH): the path
            # recorded as [host] python is the interpreter probed.
            python = resolve_host_python(flag=args.python, environ={}).path
        host = functools.partial(take_snapshot, python=python)
    result = init_profile(
        args.name,
        Path(args.dir),
        extends=args.extends,
        host=host,
        today=datetime.date.today().isoformat(),
        python=python,
    )
    out(f"wrote {result.profile}")
    if result.snapshot is not None:
        out(f"wrote {result.snapshot}")
    if not result.schema_line:
        from kvenv.model.init import SCHEMA_FILE

        out(
            f"note: no #:schema line ({Path(args.dir) / SCHEMA_FILE} does not exist); for "
            f"editor validation: kvenv schema profile > {Path(args.dir) / SCHEMA_FILE}"
        )
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


def _drift_context(loaded: LoadedProfile) -> DriftContext:
    """What host drift is judged against: the profile and its lock (without the lock when it
    cannot be read: plan and lock --check report that)."""
    from kvenv.errors import KvenvError
    from kvenv.lock.input import profile_lock
    from kvenv.plan.make import drift_context

    try:
        lock = profile_lock(loaded)
    except KvenvError:
        lock = None
    return drift_context(loaded, lock.lockfile if lock else None)


def cmd_doctor(args: argparse.Namespace) -> int:
    from kvenv.env.applied import applied_state
    from kvenv.model.loading import load_profile, recorded_host
    from kvenv.probe.doctor import diagnose

    loaded = load_profile(args.profile)
    applied = applied_state(loaded)
    if args.host:
        host, source = _load_host(args.host)
    else:  # the host interpreter the applied generation records, as verify and status judge
        from kvenv.cli.apply import judged_host

        python = judged_host(args, loaded, applied.python)
        host, _ = _load_host(
            None, import_torch=args.import_torch, python=None if python.own else python.path
        )
        source = f"live probe of {python.describe()}"
    recorded = recorded_host(loaded)
    report = diagnose(
        loaded.profile,
        host,
        host_source=source,
        strict=args.strict,
        recorded=recorded.snapshot,
        overlay=applied.overlay,
        overlay_note=applied.note,
        evaluate=_evaluator(loaded),
        drift=_drift_context(loaded),
    )
    if applied.findings:
        import attrs

        report = attrs.evolve(
            report, dependencies=(*(report.dependencies or ()), *applied.findings)
        )
    report = _complete_fixes(report, args)
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


def _complete_fixes(report: DoctorReport, args: argparse.Namespace) -> DoctorReport:
    """The report with every fix's ``{kvenv VERB}`` written as the command to run."""
    import attrs

    from kvenv.cli.hints import fill_fixes

    def complete(findings: Any) -> Any:
        return tuple(attrs.evolve(f, fix=fill_fixes(args, f.fix)) if f.fix else f for f in findings)

    dependencies = complete(report.dependencies) if report.dependencies is not None else None
    return attrs.evolve(report, findings=complete(report.findings), dependencies=dependencies)


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
    from kvenv.errors import CheckFailed, IntegrityError

    try:
        check = verify_wheel(Path(args.path), args.sha256)
    except IntegrityError as error:  # the --sha256 check ran and failed: exit 1, as documented
        raise CheckFailed(error.message, problems=error.problems, hint=error.hint) from None
    if args.json:
        emit_json(check.to_json())
        return EXIT_OK if check.ok else EXIT_CHECK_FAILED
    if not check.ok:
        from kvenv.errors import Problem

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
