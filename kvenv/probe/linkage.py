"""The native wheel's linkage held against the target and the host: every library a shared
object of the wheel needs (``DT_NEEDED``, read at lock time: :mod:`kvenv.lock.linkage`) must be
provided by someone, and no CUDA library may need a newer CUDA than the target's. Pure.

Who provides a library, in this order:

1. the manylinux policy's allowlist, which every glibc Linux has (libc, libm, libpthread,
   libdl, librt, libgcc_s, libstdc++, the dynamic loader, libutil, libnsl, libresolv);
2. the native wheel itself (the file name or ``DT_SONAME`` of one of its objects: auditwheel
   bundles libraries that way), and the overlay's wheels (their ``lib*.so*`` members, as the
   lock found them);
3. the profile's ``[native] provided_libs`` (what kvenv cannot see: an overlay wheel's library,
   a directory on ``LD_LIBRARY_PATH``);
4. the NVIDIA driver, for ``libcuda.so.1`` and NVML on a CUDA target (the host check "libcuda"
   checks the driver itself);
5. the host: the dynamic loader's cache and the libraries of its torch and ``nvidia-*``
   distributions, as the host snapshot records them (``libraries``).

A library no one provides is an **error** when the snapshot records the host's libraries (the
extension module would fail to load), ``untested`` when it does not. The rest of the manylinux
allowlist (X11, GL, glib) is assumed present, as the policy does, unless the snapshot records
the host's libraries and lacks it: then a warning (headless machines often lack libGL).
A CUDA library whose soname carries a CUDA major (``libcudart.so.13``) above the target's
``cuda`` (or on a target without CUDA) is an error, whatever the host has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kvenv.model.profile import Target
from kvenv.model.snapshot import HostSnapshot
from kvenv.probe.checks import Finding

CUDA_CHECK = "native CUDA runtime"
LINK_CHECK = "native linkage"

# The manylinux policy's libraries every glibc system has (PEP 600, auditwheel's policy).
ALWAYS = frozenset(
    {
        "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
        "libgcc_s.so.1", "libstdc++.so.6", "libutil.so.1", "libnsl.so.1", "libresolv.so.2",
        "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld-linux.so.2", "ld64.so.2",
        "ld-linux-armhf.so.3", "ld64.so.1",
    }
)  # fmt: skip
# The rest of the allowlist: assumed by the policy, absent on many headless hosts.
ASSUMED = frozenset(
    {
        "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6",
        "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0",
    }
)  # fmt: skip
DRIVER = frozenset({"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"})
# CUDA libraries whose soname's major is the CUDA major they belong to.
_CUDA_VERSIONED = re.compile(r"lib(cudart|cublas|cublasLt|nvrtc|nvJitLink)\.so\.([0-9]+)")
_SHOWN = 4


class SharedObject(NamedTuple):
    """One shared object of the native wheel: its path in the wheel and what it links."""

    path: str
    needed: tuple[str, ...]
    soname: str | None = None


def _where(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_SHOWN])
    more = len(paths) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _listing(libraries: dict[str, list[str]]) -> str:
    return "; ".join(f"{lib} (in {_where(paths)})" for lib, paths in sorted(libraries.items()))


def cuda_major(library: str) -> int | None:
    """``libcudart.so.13`` -> 13; None for a library that names no CUDA major."""
    match = _CUDA_VERSIONED.fullmatch(library)
    return int(match.group(2)) if match else None


def _target_major(target: Target | None) -> int | None:
    if target is None or target.cuda is None:
        return None
    return int(target.cuda.split(".")[0])


def cuda_problems(objects: Iterable[SharedObject], target: Target | None) -> dict[str, list[str]]:
    """The CUDA libraries the objects need beyond the target's CUDA: library -> paths."""
    major = _target_major(target)
    out: dict[str, list[str]] = {}
    for obj in objects:
        for library in obj.needed:
            need = cuda_major(library)
            if need is not None and (major is None or need > major):
                out.setdefault(library, []).append(obj.path)
    return out


def _own(objects: Iterable[SharedObject]) -> set[str]:
    """The libraries the wheel provides itself: its objects' file names and sonames."""
    found = set()
    for obj in objects:
        found.add(obj.path.rsplit("/", 1)[-1])
        if obj.soname:
            found.add(obj.soname)
    return found


def wanted(
    objects: Sequence[SharedObject], target: Target | None, declared: Sequence[str] = ()
) -> set[str]:
    """The libraries the objects need that only the host or the overlay can provide: not in
    the manylinux allowlist, not the wheel's own, not declared, not the driver's on a CUDA
    target, not a CUDA library beyond the target (an error whoever provides it)."""
    cuda_target = target is not None and (target.cuda is not None or target.gpu is not None)
    beyond = cuda_problems(objects, target)
    skip = _own(objects) | set(declared) | ALWAYS
    return {
        lib
        for obj in objects
        for lib in obj.needed
        if lib not in skip and lib not in beyond and not (cuda_target and lib in DRIVER)
    }


def check_linkage(
    objects: Sequence[SharedObject] | None,
    *,
    native: str,
    target: Target | None,
    host: HostSnapshot | None,
    declared: Sequence[str] = (),
    overlay: Sequence[str] = (),
    strict: bool = False,
) -> list[Finding]:
    """The findings of the native wheel ``native``'s shared ``objects`` (None: the lock does
    not record them) against ``target`` and ``host``; ``overlay``, the libraries the lock's
    overlay wheels were found to provide."""
    if objects is None:
        return [
            Finding(
                LINK_CHECK,
                "untested",
                f"{LINK_CHECK}: the lock does not record what {native}'s shared objects link "
                "(it was made before kvenv read them)",
                "run `kvenv lock` again (it reads the ELF headers of the wheel's shared objects)",
            )
        ]
    findings: list[Finding] = []
    beyond = cuda_problems(objects, target)
    if beyond:
        have = (
            f"the target's CUDA is {target.cuda}"
            if target and target.cuda
            else ("the target has no CUDA")
        )
        majors = sorted({cuda_major(lib) or 0 for lib in beyond})
        findings.append(
            Finding(
                CUDA_CHECK,
                "error",
                f"{CUDA_CHECK}: {native} needs CUDA {', '.join(map(str, majors))}: "
                f"{_listing(beyond)}; {have}",
                f"use a native wheel built for the target's CUDA"
                f"{f' {target.cuda}' if target and target.cuda else ' (or a CPU build)'}, or a "
                "profile (and host torch) for the CUDA the wheel needs",
            )
        )
    elif target is not None and any(
        cuda_major(lib) is not None for obj in objects for lib in obj.needed
    ):
        findings.append(
            Finding(CUDA_CHECK, "pass", f"{CUDA_CHECK}: within the target's CUDA {target.cuda}")
        )
    own = _own(objects) | set(overlay)
    cuda_target = target is not None and (target.cuda is not None or target.gpu is not None)
    libraries = host.libraries if host is not None else None
    missing: dict[str, list[str]] = {}
    assumed: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    provided = 0
    for obj in objects:
        for library in obj.needed:
            if library in beyond:
                continue
            if (
                library in ALWAYS
                or library in own
                or library in declared
                or (cuda_target and library in DRIVER)
                or (libraries is not None and libraries.provides(library))
            ):
                provided += 1
            elif library in ASSUMED:
                if libraries is None or libraries.system is None:
                    provided += 1
                else:
                    assumed.setdefault(library, []).append(obj.path)
            elif libraries is None:
                unknown.setdefault(library, []).append(obj.path)
            else:
                missing.setdefault(library, []).append(obj.path)
    fix_declare = (
        "install it on the host (the system package that ships it), or, when something kvenv "
        "does not see provides it (an overlay wheel, LD_LIBRARY_PATH), list it in "
        "[native] provided_libs"
    )
    if missing:
        findings.append(
            Finding(
                LINK_CHECK,
                "error",
                f"{LINK_CHECK}: {native} needs libraries this host does not provide: "
                f"{_listing(missing)}",
                fix_declare,
            )
        )
    if assumed:
        findings.append(
            Finding(
                LINK_CHECK,
                "error" if strict else "warning",
                f"{LINK_CHECK}: {native} needs libraries manylinux assumes but this host lacks: "
                f"{_listing(assumed)}",
                fix_declare,
            )
        )
    if unknown:
        findings.append(
            Finding(
                LINK_CHECK,
                "untested",
                f"{LINK_CHECK}: the host snapshot does not record its libraries, so "
                f"{', '.join(sorted(unknown))} could not be checked",
                "take the snapshot on the host with `kvenv fingerprint --save PATH`",
            )
        )
    if not (missing or assumed or unknown):
        findings.append(
            Finding(
                LINK_CHECK,
                "pass",
                f"{LINK_CHECK}: {len(objects)} shared object(s) of {native}; every library "
                "they need is provided",
            )
        )
    return findings
