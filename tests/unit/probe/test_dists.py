"""Distributions read from real site directories (wheels installed with PyPA installer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.env.wheelinstall import install_wheel
from kvenv.model.snapshot import Distribution
from kvenv.probe.dists import parse_headers, read_distributions
from tests.support.wheels import build_wheel


@pytest.fixture
def sites(tmp_path: Path) -> tuple[Path, Path]:
    wheels, first, second = tmp_path / "wheels", tmp_path / "site1", tmp_path / "site2"
    for site in (first, second):
        site.mkdir()
    install_wheel(
        build_wheel(wheels, "Alpha.Pkg", "1.0", requires=["beta>=2", 'gamma; python_version<"3"']),
        first,
    )
    install_wheel(build_wheel(wheels, "beta", "2.0"), first)
    install_wheel(build_wheel(wheels / "old", "beta", "1.0"), second)
    install_wheel(build_wheel(wheels, "delta", "0.1", extras={"fast": ["zeta>1"]}), second)
    bad = first / "broken-1.0.dist-info"
    bad.mkdir()
    (bad / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: one point oh\n")
    nameless = first / "nameless-1.0.dist-info"
    nameless.mkdir()
    (nameless / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    egg = second / "legacy_pkg-3.2.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy-pkg\nVersion: 3.2\n")
    (egg / "requires.txt").write_text("six>=1.10\n\n[extra]\nmock\n")
    return first, second


def test_reads_names_versions_requires_locations(sites: tuple[Path, Path]) -> None:
    first, second = sites
    dists, notes = read_distributions([str(first), str(second)])
    by_name: dict[str, Distribution] = {d.name: d for d in dists}
    assert sorted(by_name) == ["Alpha.Pkg", "beta", "broken", "delta", "legacy-pkg"]
    alpha = by_name["Alpha.Pkg"]
    assert alpha.version == "1.0"
    assert alpha.requires == ["beta>=2", 'gamma; python_version<"3"']
    assert alpha.location == str(first)
    assert by_name["delta"].requires == ['zeta>1; extra == "fast"']
    assert by_name["legacy-pkg"].requires == ["six>=1.10", 'mock; extra == "extra"']
    assert any("without a valid name" in n for n in notes)


def test_first_on_the_path_wins(sites: tuple[Path, Path]) -> None:
    first, second = sites
    dists, _ = read_distributions([str(first), str(second)])
    assert next(d for d in dists if d.name == "beta").version == "2.0"
    dists, _ = read_distributions([str(second), str(first)])
    assert next(d for d in dists if d.name == "beta").version == "1.0"


def test_malformed_version_is_recorded_as_unknown(sites: tuple[Path, Path]) -> None:
    dists, _ = read_distributions([str(sites[0])])
    broken = next(d for d in dists if d.name == "broken")
    assert broken.version is None
    assert broken.note == "malformed version metadata: 'one point oh'"


def test_missing_and_empty_path_entries(tmp_path: Path) -> None:
    assert read_distributions([str(tmp_path / "absent"), ""]) == ([], [])


def test_parse_headers_stops_at_body_and_folds() -> None:
    text = (
        "Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: a>=1;\n"
        '  python_version >= "3.8"\nRequires-Dist: b\nName: ignored\n\n'
        "Requires-Dist: in-the-description\n"
    )
    assert parse_headers(text) == ("x", "1", ['a>=1; python_version >= "3.8"', "b"])
