"""Host snapshots from a package listing, for a machine kvenv cannot run on yet. Pure.

``kvenv fingerprint --from-freeze FILE`` reads ``pip freeze`` output (or a requirements file
such as the list a hosted image installs on top of its base) and writes a
:class:`~kvenv.model.snapshot.HostSnapshot` with ``source = "recorded"``. What a listing cannot
say (Python, glibc, CUDA, driver, GPUs) comes from the command line or from a snapshot of facts
measured on the host (:class:`HostFacts`, ``measured``).

Each line of a listing is one of:

- ``name==version`` (or ``===``): present at that version;
- ``name`` or ``name<spec>`` (extras and markers allowed): present, exact version unknown;
- ``name @ url``: present; the version is read from the URL's wheel or sdist file name when it
  has one, else unknown;
- ``-e <vcs url>#egg=name``: present, version unknown (pip's ``# Editable install ...
  (name==version)`` comment before an ``-e`` line gives the version);
- a URL with no name (``git+https://...`` without ``#egg=``): skipped with a note (its
  distribution name is not in the listing);
- blank lines, comments and pip options (``--index-url``, ``-f``, ...): ignored.

Anything else is an :class:`~kvenv.errors.InputError` naming the file and line. A distribution
with an unknown version is *present with an unknown version*, as partial host knowledge is
everywhere in kvenv: the resolver accepts it and records the assumption in the lock.

Several listings are layered in order (:func:`layer_listings`), the way an image installs a
list over its base (``uv pip install`` / ``pip install`` without ``--upgrade``): a later exact
pin replaces the version; a later name or range keeps the base's version when it satisfies the
range, and otherwise makes it unknown. A listing installed with ``--force-reinstall``
(``reinstall``) makes every range line's version unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import attrs
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kvenv.errors import InputError, Problem
from kvenv.model.fields import NonEmpty, PackageName, Pep440Version
from kvenv.model.snapshot import (
    CudaInfo,
    Distribution,
    DriverInfo,
    GpuInfo,
    HostSnapshot,
    PlatformInfo,
    PythonInfo,
    TorchInfo,
)

__all__ = [
    "HostFacts",
    "Listed",
    "Listing",
    "layer_listings",
    "marker_environment",
    "parse_gpu",
    "parse_listing",
    "snapshot_from_listing",
    "torch_cuda_of",
]

How = Literal["pin", "range", "url", "editable"]

_EDITABLE_COMMENT = re.compile(
    r"#\s*Editable(?: Git)? install.*\(\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([^\s)]+)\s*\)"
)
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)")
_URL_START = re.compile(r"^(?:[a-z0-9+.-]+\+)?[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_CUDA_LOCAL = re.compile(r"^cu(\d+)$")


@attrs.frozen
class Listed:
    """One distribution line of a listing."""

    line: int
    name: str
    version: str | None  # exact version, when the line gives one
    how: How
    spec: str = ""  # the specifier of a ``range`` line ("" for a bare name)


@attrs.frozen
class Listing:
    file: str
    entries: tuple[Listed, ...]
    notes: tuple[str, ...] = ()  # lines skipped on purpose, said why
    # installed with --force-reinstall: a range line never keeps the version below it
    reinstall: bool = False


def _exact(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        try:
            Version(specs[0].version)
        except InvalidVersion:
            return None
        return specs[0].version
    return None


def _version_from_url(name: str, url: str) -> str | None:
    """The version a direct URL's file name gives, when it names ``name``'s wheel or sdist."""
    base = url.split("#", 1)[0].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    from urllib.parse import unquote

    base = unquote(base)
    try:
        if base.endswith(".whl"):
            found, version, _, _ = parse_wheel_filename(base)
        elif base.endswith((".tar.gz", ".zip")):
            found, version = parse_sdist_filename(base)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return str(version) if found == canonicalize_name(name) else None


def _problem(file: str, line: int, text: str, why: str) -> InputError:
    return InputError(
        f"{file}:{line}: not a distribution line: {text!r} ({why})",
        problems=[
            Problem(
                f"line {line}: {why}",
                file=file,
                fix="give `name==version`, `name`, `name<spec>`, `name @ url` or "
                "`-e url#egg=name`, or remove the line",
            )
        ],
        hint="a listing is `pip freeze` output or a requirements file",
    )


def _marker_holds(req: Requirement, env: Mapping[str, str] | None) -> bool:
    if req.marker is None or env is None:
        return True
    try:
        return req.marker.evaluate(dict(env))
    except (InvalidMarker, KeyError, ValueError):  # a marker needing a key we do not know
        return True


def parse_listing(text: str, *, file: str, marker_env: Mapping[str, str] | None = None) -> Listing:
    """Parse ``pip freeze`` output or a requirements file. ``marker_env`` evaluates markers
    (lines whose marker is false for the host are left out); without it every line counts."""
    entries: dict[str, Listed] = {}
    notes: list[str] = []
    editable: tuple[str, str] | None = None  # from pip's "# Editable install" comment
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            found = _EDITABLE_COMMENT.search(line)
            editable = (found.group(1), found.group(2)) if found else editable
            continue
        line = re.sub(r"\s+#.*$", "", line)
        entry: Listed | None
        if line.startswith(("-e ", "--editable ", "--editable=")):
            entry = _editable(line, number, editable, file, notes)
        elif line.startswith("-"):
            if line.startswith(("-r", "--requirement", "-c", "--constraint")):
                notes.append(f"{file}:{number}: included file not followed: {line.split()[0]} ...")
            continue  # --index-url, -f, --hash ... : options, not distributions
        elif _URL_START.match(line):
            egg = _EGG.search(line)
            if egg is None:
                notes.append(
                    f"{file}:{number}: a URL with no distribution name (no #egg=) was skipped: "
                    "add the distribution by name if the lock relies on it"
                )
                continue
            entry = Listed(number, egg.group(1), None, "url")
        else:
            entry = _requirement(line, number, file, marker_env)
        editable = None
        if entry is None:
            continue
        key = canonicalize_name(entry.name)
        if key in entries:
            raise _problem(
                file,
                number,
                raw.strip(),
                f"{entry.name} is listed twice (first on line {entries[key].line})",
            )
        entries[key] = entry
    return Listing(file, tuple(entries.values()), tuple(notes))


def _editable(
    line: str, number: int, editable: tuple[str, str] | None, file: str, notes: list[str]
) -> Listed | None:
    target = line.split(None, 1)[1] if " " in line else line.split("=", 1)[1]
    egg = _EGG.search(target)
    if egg is not None:
        version = (
            editable[1]
            if editable and canonicalize_name(editable[0]) == canonicalize_name(egg.group(1))
            else None
        )
        return Listed(number, egg.group(1), version, "editable")
    if editable is not None:
        return Listed(number, editable[0], editable[1], "editable")
    notes.append(
        f"{file}:{number}: an editable install with no distribution name was skipped "
        "(pip writes its name in a comment before the -e line)"
    )
    return None


def _requirement(
    line: str, number: int, file: str, marker_env: Mapping[str, str] | None
) -> Listed | None:
    try:
        req = Requirement(line)
    except InvalidRequirement as exc:
        raise _problem(file, number, line, str(exc).splitlines()[0]) from None
    if not _marker_holds(req, marker_env):
        return None
    if req.url:
        return Listed(number, req.name, _version_from_url(req.name, req.url), "url")
    exact = _exact(req)
    if exact is not None:
        return Listed(number, req.name, exact, "pin")
    return Listed(number, req.name, None, "range", str(req.specifier))


def _note_unknown(entry: Listed, file: str, over: str | None) -> str:
    where = f"{file}:{entry.line}"
    if entry.how == "url":
        what = f"installed from a direct URL ({where}); its version is not in the listing"
    elif entry.how == "editable":
        what = f"an editable install ({where}); its version is not in the listing"
    elif entry.spec:
        what = f"installed as `{entry.name}{entry.spec}` by {where}; exact version not recorded"
    else:
        what = f"installed as `{entry.name}` (unpinned) by {where}; exact version not recorded"
    if over is not None:
        what += f" (over {over} of the listing before it)"
    return what


def layer_listings(
    listings: Sequence[Listing], *, uninstall: Iterable[str] = ()
) -> tuple[list[Distribution], list[str]]:
    """The distributions of ``listings`` installed in order (see the module docstring), then
    ``uninstall`` removed; sorted by name. Also notes: skipped lines, uninstalls of names not
    present."""
    current: dict[str, Distribution] = {}
    notes: list[str] = []
    for index, listing in enumerate(listings):
        notes.extend(listing.notes)
        for entry in listing.entries:
            key = canonicalize_name(entry.name)
            before = current.get(key)
            if index == 0 or before is None:
                current[key] = _fresh(entry, listing.file)
                continue
            current[key] = _over(before, entry, listing.file, listing.reinstall)
    for name in uninstall:
        if current.pop(canonicalize_name(name), None) is None:
            notes.append(f"uninstall {name}: not in the listings")
    ordered = sorted(current.values(), key=lambda d: canonicalize_name(d.name))
    return ordered, notes


def _fresh(entry: Listed, file: str) -> Distribution:
    if entry.version is not None:
        return Distribution(PackageName(entry.name), Pep440Version(entry.version))
    return Distribution(PackageName(entry.name), None, note=_note_unknown(entry, file, None))


def _over(before: Distribution, entry: Listed, file: str, reinstall: bool) -> Distribution:
    if entry.version is not None:
        if before.version is not None and SpecifierSet(f"=={entry.version}").contains(
            Version(before.version), prereleases=True
        ):
            return before  # the same version (a local label like +cu128 satisfies the pin)
        note = f"{entry.version} per {file}:{entry.line} (over {before.version or 'unknown'})"
        return Distribution(before.name, Pep440Version(entry.version), note=note)
    if (
        entry.how == "range"
        and not reinstall
        and before.version is not None
        and SpecifierSet(entry.spec).contains(Version(before.version), prereleases=True)
    ):
        return before  # an installer keeps an installed version that satisfies
    over = before.version or "an unknown version"
    return Distribution(before.name, None, note=_note_unknown(entry, file, over))


# facts a listing cannot give -----------------------------------------------------------------


@attrs.frozen
class HostFacts:
    """What the command line says of the host; None: not given (the measured snapshot, then
    the listing, then defaults decide)."""

    python_version: str | None = None
    implementation: str | None = None
    os: str | None = None
    machine: str | None = None
    glibc: str | None = None
    kernel: str | None = None
    cuda: str | None = None  # the CUDA toolkit version
    driver: str | None = None
    driver_cuda: str | None = None
    nccl: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    is_kaggle: bool | None = None
    taken_at: str | None = None
    notes: tuple[str, ...] = ()


def parse_gpu(text: str, index: int) -> GpuInfo:
    """``NAME[,COMPUTE_CAPABILITY[,MEMORY_MIB]]`` (e.g. ``Tesla T4,7.5,15360``) as GPU ``index``."""
    parts = [p.strip() for p in text.split(",")]
    fix = "write --gpu 'NAME[,COMPUTE_CAPABILITY[,MEMORY_MIB]]', e.g. --gpu 'Tesla T4,7.5,15360'"
    if not parts[0] or len(parts) > 3:
        raise InputError(f"--gpu {text!r}: not NAME[,SM[,MiB]]", hint=fix)
    sm = parts[1] if len(parts) > 1 and parts[1] else None
    if sm is not None and not re.fullmatch(r"\d+\.\d+", sm):
        raise InputError(f"--gpu {text!r}: compute capability {sm!r} is not N.M", hint=fix)
    mib: int | None = None
    if len(parts) > 2 and parts[2]:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise InputError(f"--gpu {text!r}: memory {parts[2]!r} is not a whole MiB", hint=fix)
        mib = int(parts[2])
    return GpuInfo(index=index, name=parts[0], compute_capability=sm, memory_mib=mib)


def torch_cuda_of(version: str) -> str | None:
    """The CUDA a torch build is for, from its local version label: ``2.10.0+cu128`` -> 12.8;
    None for a CPU build or no label."""
    try:
        local = Version(version).local
    except InvalidVersion:
        return None
    found = _CUDA_LOCAL.match(local or "")
    if found is None:
        return None
    digits = found.group(1)
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else None


def _abi(implementation: str, version: str) -> str | None:
    numbers = version.split(".")
    if implementation == "cpython" and len(numbers) >= 2:
        return f"cp{numbers[0]}{numbers[1]}"
    return None


def _merge_dists(
    listed: Sequence[Distribution], measured: Sequence[Distribution]
) -> list[Distribution]:
    """The listing's distributions with the measured ones winning where they give a version,
    and measured names the listing lacks added."""
    merged = {canonicalize_name(d.name): d for d in listed}
    for dist in measured:
        key = canonicalize_name(dist.name)
        have = merged.get(key)
        if have is None:
            merged[key] = dist
        elif dist.version is not None and dist.version != have.version:
            said = have.version or "unknown"
            note = f"measured on the host: {dist.version}; the listing says {said}"
            if dist.note:
                note = f"{dist.note}; {note}"
            merged[key] = attrs.evolve(dist, note=note)
        elif dist.version is not None:
            merged[key] = attrs.evolve(dist, note=dist.note or have.note)
    return sorted(merged.values(), key=lambda d: canonicalize_name(d.name))


def snapshot_from_listing(
    dists: Sequence[Distribution],
    facts: HostFacts,
    *,
    sources: Sequence[str],
    measured: HostSnapshot | None = None,
    notes: Sequence[str] = (),
) -> HostSnapshot:
    """A recorded host snapshot: ``dists`` (from :func:`layer_listings`), the measured
    snapshot's facts and known versions over them, the command line's facts over both."""
    m = measured
    all_dists = _merge_dists(dists, m.distributions if m else ())
    version = facts.python_version or (m.python.version if m else None)
    if version is None:
        raise InputError(
            "a listing does not say which Python it is for",
            hint="give --python-version (e.g. 3.12.13), or --measured SNAPSHOT",
        )
    implementation = facts.implementation or (m.python.implementation if m else "cpython")
    abi = _abi(implementation, version)
    if m is not None and m.python.version == version and m.python.abi:
        abi = m.python.abi
    python = PythonInfo(
        version=NonEmpty(version),
        implementation=NonEmpty(implementation),
        abi=abi,
        executable=m.python.executable if m else None,
    )
    mp = m.platform if m else None
    glibc = facts.glibc or (mp.libc_version if mp and mp.libc == "glibc" else None)
    platform = PlatformInfo(
        os=NonEmpty(facts.os or (mp.os if mp else "linux")),
        machine=NonEmpty(facts.machine or (mp.machine if mp else "x86_64")),
        libc="glibc" if glibc else (mp.libc if mp else None),
        libc_version=glibc or (mp.libc_version if mp else None),
        kernel=facts.kernel or (mp.kernel if mp else None),
    )
    torch = _torch(all_dists, facts, m)
    driver = m.driver if m else None
    if facts.driver or facts.driver_cuda:
        driver = DriverInfo(
            version=facts.driver or (driver.version if driver else None),
            cuda_max=facts.driver_cuda or (driver.cuda_max if driver else None),
            source="given",
        )
    cuda = m.cuda if m else None
    if facts.cuda:
        cuda = (
            attrs.evolve(cuda, toolkit_version=facts.cuda)
            if cuda
            else CudaInfo(toolkit_version=facts.cuda)
        )
    gpus = list(facts.gpus) or (list(m.gpus) if m else [])
    is_kaggle = facts.is_kaggle if facts.is_kaggle is not None else bool(m and m.is_kaggle)
    described = ", ".join(sources)
    all_notes = [f"recorded from the package listing(s) {described}, not probed by kvenv"]
    if m is not None:
        all_notes.append("facts and versions measured on the host win over the listing")
    all_notes.append(
        "distributions with a null version are present with an unknown version: the resolver "
        "accepts them and records each assumption in the lock; `kvenv doctor` on the host "
        "checks them"
    )
    all_notes += list(notes) + list(facts.notes)
    return HostSnapshot(
        schema=1,
        python=python,
        platform=platform,
        distributions=all_dists,
        torch=torch,
        driver=driver,
        gpus=gpus,
        cuda=cuda,
        is_kaggle=is_kaggle,
        taken_at=facts.taken_at or (m.taken_at if m else None),
        source="recorded",
        notes=all_notes,
    )


def _torch(
    dists: Sequence[Distribution], facts: HostFacts, measured: HostSnapshot | None
) -> TorchInfo | None:
    listed = next((d for d in dists if canonicalize_name(d.name) == "torch"), None)
    if measured is not None and measured.torch is not None:
        torch = measured.torch
    elif listed is not None:
        cuda = torch_cuda_of(listed.version) if listed.version else None
        torch = TorchInfo(version=listed.version, cuda=cuda)
    else:
        return None
    if facts.nccl:
        torch = attrs.evolve(torch, nccl=facts.nccl)
    return torch


def marker_environment(python_version: str, os: str, machine: str) -> dict[str, str]:
    """The marker variables a listing's lines are evaluated with, for a host kvenv does not run
    on (CPython assumed)."""
    short = ".".join(python_version.split(".")[:2])
    platform = {"linux": "linux", "darwin": "darwin", "windows": "win32"}.get(os, os)
    return {
        "python_version": short,
        "python_full_version": python_version,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": platform,
        "platform_system": {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}.get(
            platform, platform
        ),
        "os_name": "nt" if platform == "win32" else "posix",
        "platform_machine": machine,
        "implementation_version": python_version,
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }
