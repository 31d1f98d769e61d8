"""A protected package that the profile's recorded host snapshot lists but the host interpreter
lacks is an error (not COMPATIBLE), whether or not --strict."""

from __future__ import annotations

import attrs

from kvenv.model.loading import load_profile
from kvenv.model.snapshot import read_snapshot
from kvenv.probe.checks import check_host
from kvenv.probe.doctor import diagnose

LOADED = load_profile("kaggle-t4x2-cu128")
assert LOADED.snapshot_path is not None
KAGGLE = read_snapshot(LOADED.snapshot_path)
NO_TORCH = attrs.evolve(
    KAGGLE, distributions=[d for d in KAGGLE.distributions if d.name != "torch"]
)


def test_missing_recorded_protected_package_is_an_error_even_without_strict() -> None:
    for strict in (False, True):
        found = {
            f.check: f for f in check_host(LOADED.profile, NO_TORCH, strict=strict, recorded=KAGGLE)
        }
        finding = found["protected torch"]
        assert finding.status == "error"
        assert "expected 2.10.0+cu128; found none" in finding.message
        assert finding.fix is not None and "lacks torch" in finding.fix
        assert "--python" in finding.fix


def test_doctor_of_such_a_host_is_not_compatible() -> None:
    report = diagnose(LOADED.profile, NO_TORCH, host_source="test", recorded=KAGGLE)
    assert not report.compatible
