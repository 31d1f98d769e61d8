"""``kvenv pin``'s choice among an index's target wheels (:func:`kvenv.fetch.pin.pin_index`),
over real finder records: one is taken, several are listed, a named https index is recorded
and the default one never; and how a SOURCE is told apart."""

from __future__ import annotations

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from kvenv.errors import InputError, UsageError
from kvenv.fetch.pin import parse_hf, pin_index, source_kind
from kvenv.lock.finder import Project, WheelFile

INDEX = "https://wheels.example.org/simple/"


class _Finder:
    """A finder that has already collected one project (what :class:`Finder.project` returns)."""

    def __init__(self, *wheels: WheelFile) -> None:
        self._project = Project(
            canonicalize_name("vllm"), wheels, tuple(w.filename for w in wheels)
        )

    def project(self, name: str) -> Project:
        assert canonicalize_name(name) == "vllm"
        return self._project


def _wheel(filename: str, rank: int = 0, index: str | None = INDEX) -> WheelFile:
    version = Version(filename.split("-")[1])
    return WheelFile(
        canonicalize_name("vllm"), version, filename, f"{INDEX}f/{filename}", rank,
        index=index, sha256="ab" * 32, size=123,
    )  # fmt: skip


def test_one_target_wheel_is_pinned_and_a_named_index_recorded() -> None:
    finder = _Finder(_wheel("vllm-0.18.2-cp312-cp312-linux_x86_64.whl"))
    pinned = pin_index("vllm==0.18.2", finder, named=[INDEX.rstrip("/")])
    assert (pinned.name, pinned.version, pinned.sha256, pinned.size) == (
        "vllm",
        "0.18.2",
        "ab" * 32,
        123,
    )
    assert pinned.source == {
        "kind": "index",
        "filename": "vllm-0.18.2-cp312-cp312-linux_x86_64.whl",
        "index_url": INDEX,
    }
    # an index the user did not name (the default one) is not written into the profile
    assert "index_url" not in pin_index("vllm==0.18.2", finder).source


def test_several_are_listed_never_guessed() -> None:
    finder = _Finder(
        _wheel("vllm-0.18.2-cp312-cp312-linux_x86_64.whl", rank=1),
        _wheel("vllm-0.18.2-cp38-abi3-manylinux_2_31_x86_64.whl", rank=0),
        _wheel("vllm-0.18.1-cp38-abi3-manylinux_2_31_x86_64.whl"),
    )
    with pytest.raises(UsageError) as caught:
        pin_index("vllm==0.18.2", finder)
    assert "2 wheels of vllm 0.18.2" in caught.value.message
    assert "--file vllm-0.18.2-cp38-abi3-manylinux_2_31_x86_64.whl" in (caught.value.hint or "")
    chosen = pin_index("vllm==0.18.2", finder, filename="vllm-0.18.2-cp312-cp312-linux_x86_64.whl")
    assert chosen.filename == "vllm-0.18.2-cp312-cp312-linux_x86_64.whl"
    with pytest.raises(InputError, match=r"no wheel of vllm 0\.19\.0"):
        pin_index("vllm==0.19.0", finder)


def test_sources_are_told_apart() -> None:
    assert source_kind("hf://org/repo@main/x-1.0-py3-none-any.whl") == "hf"
    assert source_kind("https://example.org/x-1.0-py3-none-any.whl") == "url"
    assert source_kind("vllm==0.18.2") == "index"
    assert source_kind("wheels/x-1.0-py3-none-any.whl") == "path"
    assert parse_hf("hf://org/repo@v1.0/x-1.0-py3-none-any.whl") == (
        "org/repo", "v1.0", "x-1.0-py3-none-any.whl",
    )  # fmt: skip
    with pytest.raises(UsageError, match="not a Hub wheel reference"):
        parse_hf("hf://org/repo/x.whl")
    with pytest.raises(UsageError, match="is not a version"):
        pin_index("vllm==notaversion", _Finder())
