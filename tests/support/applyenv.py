"""A small project for apply tests: real wheels, a profile, a kvenv lock, and a fake host whose
site-packages holds a "torch" (the protected package) and an old "helper" the overlay shadows."""

from __future__ import annotations

import hashlib
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvenv.lock.input import LockInput, read_lock_input
from kvenv.model.loading import LoadedProfile, load_profile
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot, snapshot_from_dict
from tests.support.wheels import build_wheel

if TYPE_CHECKING:
    from kvenv.env.apply import ApplyResult

REVISION = "0123456789abcdef0123456789abcdef01234567"
REPO = "owner/native-wheels"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@attrs.frozen
class Project:
    dir: Path
    name: str
    native: Path
    overlay: tuple[Path, ...]

    @property
    def profile_path(self) -> Path:
        return self.dir / "profiles" / f"{self.name}.toml"

    @property
    def lock_path(self) -> Path:
        return self.dir / "locks" / f"pylock.{self.name}.toml"

    def loaded(self) -> LoadedProfile:
        return load_profile(str(self.profile_path))

    def lock(self) -> LockInput:
        return read_lock_input(self.lock_path)


def native_wheel(directory: Path, version: str = "1.0") -> Path:
    files = {
        "nativepkg/__init__.py": (
            f"VERSION = {version!r}\n"
            "def main():\n    import helper\n    print('native', VERSION, helper.V)\n"
        )
    }
    return build_wheel(
        directory,
        "nativepkg",
        version,
        requires=["helper>=2"],
        files=files,
        entry_points={"nativecli": "nativepkg:main"},
    )


def helper_wheel(directory: Path, version: str = "2.0") -> Path:
    files = {
        "helper/__init__.py": f"V = 'helper-{version}'\n",
        "helper_extra.pth": "import os; os.environ['HELPER_PTH'] = 'ran'\nhelper_sub\n",
        "helper_sub/sub_mod.py": "X = 1\n",
    }
    return build_wheel(directory, "helper", version, files=files)


def write_project(
    directory: Path,
    *,
    native: Path,
    overlay: Sequence[Path],
    name: str = "t",
    source: str = "path",
    env: dict[str, str] | None = None,
    target: str = "",
    allow_pth: Sequence[str] = ("helper",),
) -> Project:
    """Write ``profiles/<name>.toml`` and ``locks/pylock.<name>.toml`` for these wheels.
    ``allow_pth``: the wheels allowed an executable .pth line (the helper wheel has one)."""
    (directory / "profiles").mkdir(parents=True, exist_ok=True)
    (directory / "locks").mkdir(parents=True, exist_ok=True)
    if source == "path":
        rel = native.relative_to(directory)
        source_toml = f'kind = "path"\npath = "{rel}"\n'
    else:
        source_toml = (
            f'kind = "hf"\nrepo = "{REPO}"\nrevision = "{REVISION}"\nfilename = "{native.name}"\n'
        )
    env_toml = "".join(f'{k} = "{v}"\n' for k, v in (env or {}).items())
    native_version = native.name.split("-")[1]
    profile = (
        f'schema = 1\nname = "{name}"\n{target}\n'
        f'[native]\nname = "nativepkg"\nversion = "{native_version}"\n'
        f'sha256 = "{sha256_of(native)}"\nsize = {native.stat().st_size}\n'
        f"[native.source]\n{source_toml}"
        + "".join(
            f'[[overlay.allow_pth]]\nname = "{n}"\nreason = "a test hook"\n' for n in allow_pth
        )
        + f"[runtime.env]\n{env_toml}"
    )
    (directory / "profiles" / f"{name}.toml").write_text(profile)
    packages = ""
    for wheel in overlay:
        dist, version = wheel.name.split("-")[:2]
        packages += (
            f'[[packages]]\nname = "{dist}"\nversion = "{version}"\n'
            f'[[packages.wheels]]\nname = "{wheel.name}"\n'
            f'path = "{Path("..") / wheel.relative_to(directory)}"\n'
            f'size = {wheel.stat().st_size}\nhashes = {{sha256 = "{sha256_of(wheel)}"}}\n\n'
        )
    # the native wheel recorded as a package of its own, as `kvenv lock` writes it
    packages += (
        f'[[packages]]\nname = "nativepkg"\nversion = "{native_version}"\n'
        f'[[packages.wheels]]\nname = "{native.name}"\n'
        f'path = "{Path("..") / native.relative_to(directory)}"\n'
        f'size = {native.stat().st_size}\nhashes = {{sha256 = "{sha256_of(native)}"}}\n'
        "[packages.tool.kvenv]\nrequires = []\nnative = true\n\n"
    )
    lock = (
        f'lock-version = "1.0"\ncreated-by = "tests"\n\n{packages}'
        f'[tool.kvenv]\nschema = 1\nprofile = "{name}"\nprofile-digest = "sha256:tests"\n'
        f'target = "host"\nprotected = ["torch", "torchvision", "torchaudio"]\n'
        f'[tool.kvenv.native]\nname = "nativepkg"\nversion = "{native_version}"\n'
        f'sha256 = "{sha256_of(native)}"\n'
    )
    (directory / "locks" / f"pylock.{name}.toml").write_text(lock)
    return Project(directory, name, native, tuple(overlay))


def standard_project(directory: Path, *, source: str = "path") -> Project:
    wheels = directory / "wheels"
    return write_project(
        directory,
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels)],
        env={"DEMO_VAR": "it's here"},
        source=source,
    )


def fake_host_site(directory: Path, torch_version: str = "2.10.0") -> Path:
    """A site dir playing the host's site-packages: torch (protected) and an old helper."""
    site = directory / "host-site"
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text(f"__version__ = {torch_version!r}\n")
    (site / "torch" / "lib").mkdir(exist_ok=True)
    info = site / f"torch-{torch_version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n"
    )
    (site / "helper").mkdir(exist_ok=True)
    (site / "helper" / "__init__.py").write_text("V = 'helper-host-1.0'\n")
    return site


def host_snapshot(site: Path, torch_version: str = "2.10.0") -> HostSnapshot:
    minor = sys.version_info.minor
    data = {
        "schema": 1,
        "python": {
            "version": platform.python_version(),
            "implementation": "cpython",
            "abi": f"cp3{minor}",
            "executable": sys.executable,
        },
        "platform": {"os": "linux", "machine": platform.machine(), "libc": "glibc"},
        "distributions": [
            {"name": "torch", "version": torch_version, "location": str(site)},
            {"name": "helper", "version": "1.0", "location": str(site)},
        ],
        "torch": {"version": torch_version, "location": str(site / "torch")},
    }
    return snapshot_from_dict(data)


def locations(directory: Path) -> Locations:
    return Locations(root=directory / "root", cache=directory / "cache")


def apply(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    where: Locations,
    *,
    strict: bool = False,
    recorded: HostSnapshot | None = None,
    bundle: Path | None = None,
    **options: Any,
) -> ApplyResult:
    """Plan against ``where`` and execute the plan, as ``kvenv apply`` does (``bundle`` is
    opened, and verified, first)."""
    from kvenv.env.apply import ApplyOptions, plan_apply
    from kvenv.env.apply import apply as execute
    from kvenv.fetch.bundle import open_bundle

    repair = bool(options.get("repair", False))
    plan = plan_apply(loaded, lock, host, where, strict=strict, recorded=recorded, repair=repair)
    opened = open_bundle(bundle) if bundle is not None else None
    return execute(plan, ApplyOptions(bundle=opened, **options))


# A [target] that is this machine: profiles with it take the no-op fast path and pass the live
# host's target checks (for tests that run the CLI against the live host).
LOCAL_TARGET = (
    f'[target]\npython = "{platform.python_version()}"\nabi = "cp3{sys.version_info.minor}"\n'
    f'machine = "{platform.machine()}"\n'
)


def restamp_lock(path: Path) -> None:
    """Write the lock at ``path`` again as ``kvenv lock`` writes one (its digests recorded,
    :mod:`kvenv.lock.digest`), after a test edited it on purpose."""
    from kvenv._util import tomlio
    from kvenv.lock.pylock import dumps_lock

    path.write_text(dumps_lock(tomlio.loads(path.read_text(), file=str(path))), encoding="utf-8")


def local_project(directory: Path) -> Project:
    """The native wheel and the helper overlay, targeting this machine."""
    wheels = directory / "wheels"
    return write_project(
        directory,
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels)],
        target=LOCAL_TARGET,
    )
