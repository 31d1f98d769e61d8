"""Host checks: a host snapshot held against a profile's target. Pure.

Used by ``kvenv plan`` (findings before apply) and ``kvenv doctor``. Implementation, ABI, OS and
machine mismatches, and a protected package the recorded snapshot lists but the host lacks (the
wrong interpreter probed, most often), are always errors; the other checks are warnings unless
``strict``. A fact the snapshot does not hold (NCCL without ``--import-torch``, the version of
a package the recorded snapshot lists without one) is ``untested``, never a pass.

``recorded`` is the profile's own host snapshot (``host.snapshot``): the protected packages
and NCCL of the host are expected at the versions it records.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Literal

import attrs
from packaging.utils import canonicalize_name

from kvenv.model import cpuisa
from kvenv.model.profile import Gpu, Profile, Target, TargetCpu
from kvenv.model.snapshot import DriverInfo, GpuInfo, HostSnapshot

Status = Literal["pass", "warning", "error", "untested"]

# Drivers report a GPU's memory a little differently (ECC, reserved areas): a GPU with at least
# this share of the target's memory counts as the target's.
MEMORY_TOLERANCE = 0.98
IMPORT_TORCH_FIX = (
    "take the snapshot with `kvenv fingerprint --import-torch` (or doctor --import-torch)"
)


@attrs.frozen
class Finding:
    check: str
    status: Status
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }


def _numbers(version: str | None) -> tuple[int, ...] | None:
    """``580.159.04`` -> (580, 159, 4); None when it is not dotted numbers."""
    if not version:
        return None
    parts = re.findall(r"\d+", version.split("+")[0])
    return tuple(int(p) for p in parts) if parts else None


def _at_least(actual: str | None, minimum: str) -> bool:
    have, need = _numbers(actual), _numbers(minimum)
    return have is not None and need is not None and have >= need


def _same_release(actual: str | None, expected: str) -> bool:
    """Equal on as many components as ``expected`` gives (12.8 matches 12.8.93)."""
    have, want = _numbers(actual), _numbers(expected)
    return have is not None and want is not None and have[: len(want)] == want


def _mismatch(status: Status, check: str, expected: str, actual: str | None, fix: str) -> Finding:
    return Finding(check, status, f"{check}: expected {expected}; found {actual or 'none'}", fix)


def _same_model(model: str, name: str) -> bool:
    """Does a GPU reported as ``name`` count as the target's ``model`` (either names the other)?"""
    want, have = model.lower(), name.lower()
    return want in have or have in want


class _Checker:
    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def ok(self, check: str, actual: str) -> Finding:
        return Finding(check, "pass", f"{check}: {actual}")

    def bad(self, check: str, expected: str, actual: str | None, fix: str) -> Finding:
        """A mismatch: a warning, an error under ``strict``."""
        return _mismatch("error" if self.strict else "warning", check, expected, actual, fix)

    def hard(self, check: str, expected: str, actual: str | None, fix: str) -> Finding:
        """Pass when ``actual`` is ``expected``, else an error even without ``strict``."""
        if actual is not None and actual == expected:
            return self.ok(check, actual)
        return _mismatch("error", check, expected, actual, fix)

    def untested(self, check: str, why: str, fix: str | None = None) -> Finding:
        return Finding(check, "untested", f"{check}: {why}", fix)


def check_host(
    profile: Profile,
    host: HostSnapshot,
    *,
    strict: bool = False,
    recorded: HostSnapshot | None = None,
) -> list[Finding]:
    """The findings of ``host`` against ``profile.target`` (empty when there is no target)."""
    target = profile.target
    if target is None:
        return []
    c = _Checker(strict)
    findings = list(_identity(c, target, host))
    findings += _python_and_libc(c, target, host)
    findings += _protected(c, profile, host, recorded)
    findings += _torch(c, target, host)
    if target.gpu is not None:
        findings += _gpus(c, target.gpu, host)
    findings += _driver(c, target, host)
    if target.gpu is not None:
        findings.append(_nccl(c, host, recorded))
    if target.cpu is not None:
        findings += _cpu(c, target.cpu, host)
    return findings


def _identity(c: _Checker, target: Target, host: HostSnapshot) -> Iterator[Finding]:
    sys_platform = {"windows": "win32"}.get(target.os, target.os)
    yield c.hard(
        "Python implementation",
        target.implementation,
        host.python.implementation,
        "use a profile for this interpreter",
    )
    if target.pure:
        yield c.ok("Python ABI", f"{host.python.abi or 'any'} (pure-Python target: any ABI)")
        yield c.ok("operating system", f"{host.platform.os} (pure-Python target: any)")
        yield c.ok("machine", f"{host.platform.machine} (pure-Python target: any)")
        return
    yield c.hard(
        "Python ABI",
        target.abi,
        host.python.abi,
        f"run on a {target.abi} interpreter or use a profile for this one",
    )
    yield c.hard("operating system", sys_platform, host.platform.os, "use a profile for this OS")
    yield c.hard(
        "machine",
        target.machine,
        host.platform.machine,
        "use a profile for this machine architecture",
    )


def _python_and_libc(c: _Checker, target: Target, host: HostSnapshot) -> Iterator[Finding]:
    actual = host.python.version
    if target.pure:
        if _at_least(actual, target.python):
            yield c.ok("Python version", f"{actual} (at least {target.python})")
        else:
            yield c.hard(
                "Python version",
                f">= {target.python}",
                actual,
                f"use Python {target.python} or newer",
            )
    elif _same_release(actual, target.python):
        yield c.ok("Python version", actual)
    else:
        yield c.bad(
            "Python version",
            target.python,
            actual,
            f"use Python {target.python}, or a profile validated for {actual}",
        )
    if target.glibc is None or target.os != "linux":
        return
    libc, version = host.platform.libc, host.platform.libc_version
    found = f"{libc} {version}" if libc and version else libc
    if libc == "glibc" and _at_least(version, target.glibc):
        yield c.ok("glibc", f"{version} (at least {target.glibc})")
    else:
        yield c.bad(
            "glibc",
            f"glibc >= {target.glibc}",
            found,
            f"use a host with glibc {target.glibc} or newer (manylinux wheels need it)",
        )


def _protected(
    c: _Checker, profile: Profile, host: HostSnapshot, recorded: HostSnapshot | None
) -> Iterator[Finding]:
    for name in profile.host.protected:
        check = f"protected {canonicalize_name(name)}"
        have = host.find(name)
        want = recorded.find(name) if recorded else None
        if have is None and want is None:
            yield c.ok(check, "not installed (nor recorded in the host snapshot)")
        elif have is None and want is not None:
            # The recorded host provides it and this one does not: usually the wrong
            # interpreter was probed. An error even without --strict (kvenv never installs it).
            yield _mismatch(
                "error",
                check,
                want.version or "installed",
                None,
                f"this host lacks {name}, which the profile expects the host to provide; "
                "if another interpreter is the host, name it with --python, $KVENV_PYTHON "
                "or [host] python",
            )
        elif have is not None and want is None:
            where = "no host snapshot" if recorded is None else "not in the host snapshot"
            yield c.ok(check, f"{have.version or 'version unknown'} ({where} to compare)")
        elif have is not None and want is not None:
            if want.version is None or have.version is None:
                side = "the host snapshot" if want.version is None else "this host"
                yield c.untested(
                    check,
                    f"{have.version or 'present'}; {side} does not record its version",
                    "re-record the host snapshot on the host with `kvenv fingerprint --save`",
                )
            elif have.version == want.version:
                yield c.ok(check, have.version)
            else:
                yield c.bad(
                    check,
                    f"{want.version} (the host snapshot)",
                    have.version,
                    f"the lock was made for {name} {want.version}: run on that host, or "
                    "re-snapshot this host (`kvenv fingerprint --save`) and re-lock",
                )


def _torch(c: _Checker, target: Target, host: HostSnapshot) -> Iterator[Finding]:
    if target.cuda is None:
        return
    torch = host.torch
    if torch is None or torch.version is None:
        yield c.bad(
            "torch CUDA",
            f"torch built for CUDA {target.cuda}",
            "no torch",
            "the host must provide torch (it is protected; kvenv never installs it)",
        )
        return
    if torch.cuda is None:
        yield c.bad(
            "torch CUDA",
            target.cuda,
            f"CPU-only torch {torch.version}",
            f"use a host whose torch is built for CUDA {target.cuda}",
        )
    elif _same_release(torch.cuda, target.cuda):
        yield c.ok("torch CUDA", f"{torch.cuda} (torch {torch.version})")
    else:
        yield c.bad(
            "torch CUDA",
            target.cuda,
            f"{torch.cuda} (torch {torch.version})",
            f"use a host whose torch is built for CUDA {target.cuda}, or a profile for "
            f"CUDA {torch.cuda}",
        )
    if torch.cuda_available is None:
        yield c.untested(
            "CUDA available to torch", "not known without importing torch", IMPORT_TORCH_FIX
        )
    elif torch.cuda_available:
        yield c.ok("CUDA available to torch", f"yes, {torch.device_count} device(s)")
    else:
        yield c.bad(
            "CUDA available to torch",
            "yes",
            "no",
            "check the driver, libcuda and CUDA_VISIBLE_DEVICES",
        )


def _cpu(c: _Checker, want: TargetCpu, host: HostSnapshot) -> Iterator[Finding]:
    """The CPU features the native wheel needs: missing ones are errors even without
    ``strict`` (the code dies with an illegal instruction), unknown ones untested."""
    cpu = host.cpu
    fix_snapshot = "take the snapshot on the host with `kvenv fingerprint --save PATH`"
    if cpu is None:
        if want.level is not None:
            yield c.untested("CPU level", "the host snapshot does not record the CPU", fix_snapshot)
        if want.features:
            yield c.untested(
                "CPU features", "the host snapshot does not record the CPU", fix_snapshot
            )
        return
    model = cpu.model or "this CPU"
    if want.level is not None:
        if cpu.level is not None and cpuisa.level_number(cpu.level) >= cpuisa.level_number(
            want.level
        ):
            yield c.ok("CPU level", f"{cpu.level} ({model}; at least {want.level})")
        else:
            yield Finding(
                "CPU level",
                "error",
                f"CPU level: the native wheel needs {want.level}; {model} is "
                f"{cpu.level or 'below x86-64-v1'}",
                f"run on a CPU of {want.level} or newer, or use a native wheel (and profile) "
                f"built for {cpu.level or 'this CPU'}",
            )
    if not want.features:
        return
    missing = [f for f in want.features if f not in cpu.features]
    if not missing:
        yield c.ok("CPU features", f"{', '.join(want.features)} ({model})")
        return
    yield Finding(
        "CPU features",
        "error",
        f"CPU features: the native wheel needs {', '.join(want.features)}; {model} lacks "
        f"{', '.join(missing)}",
        f"run on a CPU with {', '.join(missing)}, or use a native wheel (and profile) built "
        "without them",
    )


def _no_gpu_reason(host: HostSnapshot) -> str:
    if host.driver is None:
        return "0 (no NVIDIA driver)"
    return f"0 (driver {host.driver.version} sees no GPU)"


def _gpus(c: _Checker, gpu: Gpu, host: HostSnapshot) -> Iterator[Finding]:
    gpus = host.gpus
    count = len(gpus)
    names = ", ".join(g.name for g in gpus)
    if count >= gpu.count:
        extra = f" (the target has {gpu.count})" if count > gpu.count else ""
        yield c.ok("GPU count", f"{count}{extra}")
    else:
        yield c.bad(
            "GPU count",
            f"{gpu.count} x {gpu.model}",
            f"{count} ({names})" if count else _no_gpu_reason(host),
            f"run on a machine with {gpu.count} x {gpu.model} (on Kaggle: accelerator "
            '"GPU T4 x2"), and check CUDA_VISIBLE_DEVICES',
        )
    if not gpus:
        yield c.untested("GPU model", "no visible GPU to check")
        if gpu.compute_capability:
            yield c.untested("compute capability", "no visible GPU to check")
        if gpu.memory_mib:
            yield c.untested("GPU memory", "no visible GPU to check")
        return
    if all(_same_model(gpu.model, g.name) for g in gpus):
        yield c.ok("GPU model", names)
    else:
        yield c.bad("GPU model", gpu.model, names, f"use {gpu.model} GPUs or a profile for these")
    if gpu.compute_capability:
        ccs = ", ".join(g.compute_capability or "unknown" for g in gpus)
        if all(g.compute_capability == gpu.compute_capability for g in gpus):
            yield c.ok("compute capability", ccs)
        else:
            yield c.bad(
                "compute capability",
                gpu.compute_capability,
                ccs,
                f"the native wheel is built for SM {gpu.compute_capability}; use such GPUs "
                "or a wheel built for these",
            )
    if gpu.memory_mib:
        floor = int(gpu.memory_mib * MEMORY_TOLERANCE)
        mems = ", ".join(f"{g.memory_mib} MiB" if g.memory_mib else "unknown" for g in gpus)
        if all(g.memory_mib is not None and g.memory_mib >= floor for g in gpus):
            yield c.ok("GPU memory", mems)
        else:
            yield c.bad(
                "GPU memory",
                f"{gpu.memory_mib} MiB each",
                mems,
                "use GPUs with that much memory, or lower gpu_memory_utilization / "
                "max_model_len for these",
            )


def _driver(c: _Checker, target: Target, host: HostSnapshot) -> Iterator[Finding]:
    driver = host.driver
    version = driver.version if driver else None
    if target.driver_min is not None:
        if _at_least(version, target.driver_min):
            yield c.ok("NVIDIA driver", f"{version} (at least {target.driver_min})")
        else:
            yield c.bad(
                "NVIDIA driver",
                f">= {target.driver_min}",
                version,
                f"install NVIDIA driver {target.driver_min} or newer",
            )
    if target.cuda is not None and driver is not None and version is not None:
        if driver.cuda_max is None:
            yield c.untested(
                "driver CUDA",
                "the driver's CUDA version is not recorded",
                "take the snapshot where nvidia-smi or pynvml is available",
            )
        elif _at_least(driver.cuda_max, target.cuda):
            yield c.ok("driver CUDA", f"up to {driver.cuda_max} (needs {target.cuda})")
        else:
            yield c.bad(
                "driver CUDA",
                f"a driver that runs CUDA {target.cuda}",
                f"CUDA up to {driver.cuda_max}",
                f"upgrade the NVIDIA driver to one supporting CUDA {target.cuda}",
            )
    if target.gpu is not None or target.cuda is not None:
        libcuda = host.cuda.libcuda if host.cuda else None
        if libcuda:
            yield c.ok("libcuda", libcuda)
        else:
            yield c.bad(
                "libcuda",
                "the CUDA driver library",
                None,
                "install the NVIDIA driver, or mount its libraries (containers: "
                "/usr/local/nvidia/lib64)",
            )


def _nccl(c: _Checker, host: HostSnapshot, recorded: HostSnapshot | None) -> Finding:
    have = host.torch.nccl if host.torch else None
    want = recorded.torch.nccl if recorded and recorded.torch else None
    if have is None:
        return c.untested("NCCL", "not known without importing torch", IMPORT_TORCH_FIX)
    if want is None or have == want:
        return c.ok("NCCL", have)
    return c.bad(
        "NCCL",
        f"{want} (the host snapshot)",
        have,
        "tensor parallelism was validated with that NCCL; use the recorded host or re-validate",
    )


def check_tensor_parallel(
    gpus: Sequence[GpuInfo],
    tensor_parallel_size: int,
    gpu: Gpu | None = None,
    driver: DriverInfo | None = None,
) -> Finding:
    """Can the visible GPUs run ``tensor_parallel_size`` ranks (one GPU each, the first ones),
    and, with the profile's ``gpu``, are those the target's model and compute capability?"""
    tp = tensor_parallel_size
    check = "tensor parallel"
    if len(gpus) < tp:
        if gpus:
            found = f"{len(gpus)} visible ({', '.join(g.name for g in gpus)})"
        else:
            found = "no visible GPU" + (
                " (no NVIDIA driver)" if driver is None else f" (driver {driver.version})"
            )
        return Finding(
            check,
            "error",
            f"tensor_parallel_size={tp} needs {tp} visible GPUs; found {found}",
            f"use tensor_parallel_size <= {len(gpus)}, or run where {tp} GPUs are visible "
            "(check CUDA_VISIBLE_DEVICES)"
            if gpus
            else "run on a machine with NVIDIA GPUs (on Kaggle: accelerator GPU T4 x2)",
        )
    used = gpus[:tp]
    if gpu is not None:
        cc = gpu.compute_capability
        odd = [
            g
            for g in used
            if not _same_model(gpu.model, g.name) or (cc is not None and g.compute_capability != cc)
        ]
        if odd:
            sm = f" / SM {cc}" if cc else ""
            listed = ", ".join(f"{g.name} ({g.compute_capability or '?'})" for g in odd)
            return Finding(
                check,
                "error",
                f"visible GPUs do not all match {gpu.model}{sm}: {listed}",
                "use the profile's GPUs, or a profile (and native wheel) built for these",
            )
    names = sorted({g.name for g in used})
    ccs = sorted({g.compute_capability or "?" for g in used})
    return Finding(
        check,
        "pass",
        f"{tp} visible {' / '.join(names)} (SM {', '.join(ccs)}) GPU(s) support "
        f"tensor_parallel_size={tp}",
    )
