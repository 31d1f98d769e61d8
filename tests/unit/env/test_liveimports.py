"""The overlay against ``sys.modules`` (kvenv/env/liveimports.py): which already imported
modules clash with the generation, and what activation does about them. The live-kernel
version of this is tests/notebook/test_live_kernel.py."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from kvenv.env.activation import activate_in_process
from kvenv.env.liveimports import RESTART_FIX, SCRIPT_FIX, check_live_imports, loaded_clashes
from kvenv.env.manifest import Manifest, read_manifest
from kvenv.errors import AlreadyImportedWarning, ConflictError
from tests.support.applyenv import apply, fake_host_site, host_snapshot, locations, standard_project


def _manifest(tmp_path: Path) -> Manifest:
    """The standard project applied (overlay: helper 2.0, native: nativepkg 1.0)."""
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path / "host"))
    result = apply(project.loaded(), project.lock(), host, locations(tmp_path))
    assert result.manifest is not None
    return read_manifest(Path(result.manifest))


def _module(name: str, site: Path, version: str | None, *, dist_info: bool = True) -> ModuleType:
    """``name`` as if imported from a package in ``site``, its distribution at ``version``."""
    package = site / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    if version is not None and dist_info:
        meta = site / f"{name}-{version}.dist-info"
        meta.mkdir(exist_ok=True)
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    module = ModuleType(name)
    module.__file__ = str(package / "__init__.py")
    if version is not None and not dist_info:
        module.__version__ = version  # type: ignore[attr-defined]
    return module


def test_a_module_loaded_elsewhere_at_another_version_clashes(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    old = _module("helper", tmp_path / "site", "1.5")
    (clash,) = loaded_clashes(manifest, {"helper": old})
    assert (clash.module, clash.distribution, clash.overlay_version) == ("helper", "helper", "2.0")
    assert (clash.loaded_version, clash.loaded_from) == ("1.5", old.__file__)
    text = clash.message()
    assert f"'helper' is already imported (1.5, from {old.__file__})" in text
    assert "the overlay provides helper 2.0" in text


def test_the_version_falls_back_to_dunder_version_then_unknown(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    with_attr = _module("helper", tmp_path / "a", "1.9", dist_info=False)
    assert loaded_clashes(manifest, {"helper": with_attr})[0].loaded_version == "1.9"
    bare = ModuleType("helper")  # no file, no metadata, no version: cannot be told, so a clash
    (clash,) = loaded_clashes(manifest, {"helper": bare})
    assert (clash.loaded_version, clash.loaded_from) == (None, None)
    assert "an unknown version, from no file" in clash.message()


def test_the_same_version_elsewhere_or_the_generations_own_files_are_fine(
    tmp_path: Path,
) -> None:
    manifest = _manifest(tmp_path)
    same = _module("helper", tmp_path / "site", "2.0")
    assert loaded_clashes(manifest, {"helper": same}) == []
    own = ModuleType("helper")
    own.__file__ = str(Path(manifest.dirs.overlay) / "helper" / "__init__.py")
    native = ModuleType("nativepkg")
    native.__file__ = str(Path(manifest.dirs.native) / "nativepkg" / "__init__.py")
    assert loaded_clashes(manifest, {"helper": own, "nativepkg": native}) == []
    assert loaded_clashes(manifest, {"json": sys.modules["json"]}) == []  # not the overlay's


def test_activation_warns_and_strict_refuses_before_changing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _manifest(tmp_path)
    path = Path(manifest.dirs.native).parent / "manifest.json"
    monkeypatch.setitem(sys.modules, "helper", _module("helper", tmp_path / "site", "1.5"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = list(sys.path)
    with pytest.raises(ConflictError) as refused:
        activate_in_process(manifest=path, strict=True)
    assert refused.value.message == (
        "module helper (loaded 1.5, the overlay's helper 2.0) is already imported in this "
        "process at another version than the overlay's; activation would mix the two"
    )
    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].fix == SCRIPT_FIX  # pytest is no interactive interpreter
    assert refused.value.hint == SCRIPT_FIX
    assert sys.path == before
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)  # an interactive interpreter
    monkeypatch.setitem(sys.modules, "nativepkg", _module("nativepkg", tmp_path / "s2", "0.5"))
    with pytest.raises(ConflictError) as refused:
        activate_in_process(manifest=path, strict=True)
    assert refused.value.message.startswith(
        "2 modules are: nativepkg (loaded 0.5, the overlay's nativepkg 1.0), helper (loaded "
        "1.5, the overlay's helper 2.0); already imported"
    ) or refused.value.message.startswith(
        "2 modules are: helper (loaded 1.5, the overlay's helper 2.0), nativepkg (loaded "
        "0.5, the overlay's nativepkg 1.0); already imported"
    )
    assert refused.value.hint == RESTART_FIX and "restart the kernel" in RESTART_FIX
    monkeypatch.delattr(sys, "ps1")
    monkeypatch.delitem(sys.modules, "nativepkg")
    with pytest.warns(AlreadyImportedWarning, match=r"'helper' is already imported \(1\.5") as w:
        check_live_imports(manifest)
    assert w[0].filename == __file__  # pointed at the caller outside kvenv


def test_a_namespace_package_is_compared_by_the_children_the_generation_has(
    tmp_path: Path,
) -> None:
    manifest = _manifest(tmp_path)
    overlay = Path(manifest.dirs.overlay)
    (overlay / "helper" / "proto").mkdir(parents=True)  # as if helper were a namespace
    host = tmp_path / "site"
    namespace = ModuleType("helper")
    namespace.__path__ = [str(host / "helper")]  # type: ignore[attr-defined]
    (host / "helper-1.5.dist-info").mkdir(parents=True)
    (host / "helper-1.5.dist-info" / "METADATA").write_text("Name: helper\nVersion: 1.5\n")
    proto = ModuleType("helper.proto")
    proto.__file__ = str(host / "helper" / "proto" / "__init__.py")
    other = ModuleType("helper.colab")  # the host's own part of the namespace: not compared
    other.__file__ = str(host / "helper" / "colab" / "__init__.py")
    alone = {"helper": namespace, "helper.colab": other}
    assert loaded_clashes(manifest, alone) == []
    (clash,) = loaded_clashes(manifest, {**alone, "helper.proto": proto})
    assert (clash.module, clash.loaded_version) == ("helper.proto", "1.5")
    assert clash.loaded_from == proto.__file__


def test_the_runtime_activating_on_demand_warns_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from kvenv.runtime.llm import activate_runtime

    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path / "host"))
    apply(project.loaded(), project.lock(), host, locations(tmp_path))
    monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "environ", dict(os.environ))  # activation sets variables
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "helper", _module("helper", tmp_path / "site", "1.5"))
    with pytest.warns(AlreadyImportedWarning, match=r"the overlay provides helper 2\.0"):
        assert activate_runtime(str(project.profile_path)) is True


def test_a_process_that_only_starts_others_skips_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kvenv serve`` activates to find vLLM for a child process: nothing this process
    imported matters there, so no live-kernel warning (issue 37)."""
    import os
    import warnings

    from kvenv.runtime.llm import activate_runtime

    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path / "host"))
    apply(project.loaded(), project.lock(), host, locations(tmp_path))
    monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "helper", _module("helper", tmp_path / "site", "1.5"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert activate_runtime(str(project.profile_path), check_imports=False) is True


def test_nothing_applied_warns_naming_profile_root_and_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from kvenv.errors import NotAppliedWarning

    project = standard_project(tmp_path / "proj")
    root = tmp_path / "empty-root"
    monkeypatch.setenv("KVENV_ROOT", str(root))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KVENV_MANIFEST", raising=False)
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.warns(NotAppliedWarning) as caught:
        assert activate_in_process(str(project.profile_path)) is False
    (warning,) = caught
    text = str(warning.message)
    assert f"nothing is applied for profile {project.loaded().profile.name!r} in {root}" in text
    assert f"run `kvenv apply {project.profile_path} --root {root}` first" in text
    assert warning.filename == __file__  # pointed at the caller
