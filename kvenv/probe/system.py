"""The operating system under the interpreter: OS, machine, C library and kernel."""

from __future__ import annotations

from kvenv.model.fields import NonEmpty
from kvenv.model.snapshot import PlatformInfo
from kvenv.probe.effects import Effects

OSRELEASE = "/proc/sys/kernel/osrelease"


def probe_platform(effects: Effects, *, sys_platform: str, machine: str) -> PlatformInfo:
    """``sys_platform`` and ``machine`` come from the probed interpreter; libc and kernel are
    the machine's (``os.confstr``, else musl's ``ldd``; ``/proc/sys/kernel/osrelease``)."""
    libc = effects.libc() if sys_platform.startswith("linux") else None
    kernel_text = effects.read_text(OSRELEASE)
    kernel = kernel_text.strip() if kernel_text else None
    return PlatformInfo(
        os=NonEmpty(sys_platform),
        machine=NonEmpty(machine),
        libc="musl" if libc and libc[0] == "musl" else ("glibc" if libc else None),
        libc_version=libc[1] if libc else None,
        kernel=kernel,
    )
