"""``kvenv fingerprint --from-freeze``: host snapshots from package listings (kvenv.probe.freeze),
round-tripped on the real Colab freezes, layered like Kaggle's image, and the committed Kaggle
snapshot regenerated from its inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from kvenv.cli import main
from kvenv.errors import InputError
from kvenv.model.snapshot import read_snapshot
from kvenv.probe.freeze import (
    HostFacts,
    layer_listings,
    parse_gpu,
    parse_listing,
    snapshot_from_listing,
    torch_cuda_of,
)
from tests.support.paths import REPO

HOSTS = REPO / "docs" / "hosts"
FREEZES = {
    "colab-gpu.pip-freeze.2026-05-08.txt": ("3.12.13", 726),
    "colab-gpu.pip-freeze.2026-08-19.txt": ("3.13.15", 703),
}
# the direct-URL lines of both freezes: the version their file name gives, or none (git)
URL_VERSIONS = {
    "2026-05-08": {
        "cucim-cu12": "26.2.0",
        "cuvs-cu12": "26.2.0",
        "en-core-web-sm": "3.8.0",
        "google-colab": "1.0.0",
        "jupyter-kernel-gateway": None,
        "nx-cugraph-cu12": "26.2.0",
    },
    "2026-08-19": {
        "cucim-cu12": "26.2.1",
        "cuvs-cu12": "26.2.0",
        "en-core-web-sm": "3.8.0",
        "google-colab": "1.0.0",
        "jupyter-kernel-gateway": None,
        "nx-cugraph-cu12": "26.2.0",
    },
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _expected(path: Path) -> dict[str, str | None]:
    """What each line of a freeze says, read independently of kvenv: ``name==version`` by
    splitting, ``name @ url`` from the table above."""
    date = re.search(r"\d{4}-\d\d-\d\d", path.name)
    assert date is not None
    urls = URL_VERSIONS[date.group(0)]
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        if " @ " in line:
            name = canonicalize_name(line.split(" @ ")[0])
            out[name] = urls[name]
        elif line.strip():
            name, version = line.split("==")
            out[canonicalize_name(name)] = version
    return out


@pytest.mark.parametrize("freeze", sorted(FREEZES))
def test_round_trip_on_a_real_freeze(
    freeze: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python, count = FREEZES[freeze]
    target = tmp_path / "host.json"
    code, _, err = run(
        capsys,
        "fingerprint",
        "--from-freeze",
        str(HOSTS / freeze),
        "--python-version",
        python,
        "--glibc",
        "2.35",
        "--save",
        str(target),
    )
    assert code == 0, err
    snap = read_snapshot(target)
    got = {canonicalize_name(d.name): d.version for d in snap.distributions}
    expected = _expected(HOSTS / freeze)
    assert len(expected) == count == len(got)
    assert got == expected  # every distribution, with its version or unknown (None)
    assert snap.source == "recorded" and snap.python.version == python
    assert snap.python.abi == "cp3" + python.split(".")[1]
    assert (snap.platform.libc, snap.platform.libc_version) == ("glibc", "2.35")
    assert snap.torch is not None and snap.torch.cuda == "12.8"
    assert snap.torch.version == expected["torch"]
    gateway = snap.find("jupyter_kernel_gateway")
    assert gateway is not None and gateway.note is not None and "direct URL" in gateway.note


# The command docs/hosts.md gives for the built-in Kaggle snapshot.
KAGGLE_COMMAND = [
    "fingerprint",
    "--from-freeze",
    "docs/hosts/colab-gpu.pip-freeze.2026-05-08.txt",
    "--from-freeze",
    "docs/hosts/kaggle-requirements.2026-08-12.txt",
    "--reinstall-from",
    "docs/hosts/kaggle-post-install.2026-08-12.txt",
    "--uninstall",
    "google-cloud-bigquery-storage",
    "--measured",
    "docs/hosts/kaggle-measured.2026-08-23.json",
    "--note",
    "base: Colab's GPU runtime pip freeze of 2026-05-08 (googlecolab/backend-info 6f38803), "
    "the closest published list of the base of Kaggle's GPU image (Colab release 2026-05-14); "
    "Kaggle's own list and post-install steps: Kaggle/docker-python 78aaa43 (2026-08-12)",
    "--note",
    "measured: the reference system kaggle-vllm on Kaggle, 2026-08-23 (Python, glibc, kernel, "
    "torch, NCCL, CUDA, driver, GPUs, and the packages it relied on); measured values win",
    "--note",
    "made by the command in docs/hosts.md; a `kvenv fingerprint --save` taken in a Kaggle "
    "notebook knows more",
]


def test_the_committed_kaggle_snapshot_is_regenerated_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "kaggle.json"
    monkeypatch.chdir(REPO)
    code, _, err = run(capsys, *KAGGLE_COMMAND, "--save", str(out))
    assert code == 0, err
    committed = REPO / "profiles" / "kaggle-t4x2-cu128.host.json"
    assert out.read_text() == committed.read_text()
    doc = (REPO / "docs" / "hosts.md").read_text()
    for word in KAGGLE_COMMAND[1:11]:
        assert word in doc


def test_the_kaggle_snapshot_layers_kaggles_steps() -> None:
    snap = read_snapshot(REPO / "profiles" / "kaggle-t4x2-cu128.host.json")
    version = {canonicalize_name(d.name): d.version for d in snap.distributions}
    assert version["protobuf"] == "5.29.5"  # force-installed over the base's 5.29.6
    assert version["setuptools"] is None  # reinstalled as >=70.0,<82 over 75.2.0: unknown
    assert version["transformers"] == "5.0.0"  # >=5.0.0 is satisfied by the base: kept
    assert version["ipywidgets"] == "8.1.5"  # pinned over the base's 7.7.1
    assert version["torchcodec"] == "0.10.0+cu128"  # ==0.10.0 is satisfied by +cu128: kept
    assert version["pycuda"] is None and version["boruta"] is None  # added, unpinned
    assert "google-cloud-bigquery-storage" not in version  # removed by the image
    assert version["blake3"] is None  # only the reference system knew it is there
    assert version["numpy"] == "2.0.2"
    assert snap.torch is not None and snap.torch.nccl == "2.27.5"  # measured
    assert [g.name for g in snap.gpus] == ["Tesla T4", "Tesla T4"]
    assert snap.is_kaggle and snap.python.version == "3.12.13"


def test_lines_of_every_kind() -> None:
    text = "\n".join(
        [
            "# a comment",
            "--index-url https://mirror.example.invalid/simple",
            "alpha==1.0  # trailing comment",
            "Beta_Pkg[extra1]>=2,<3",
            "gamma",
            "delta @ https://files.example.invalid/delta-4.5.6-py3-none-any.whl#sha256=00",
            "eps @ git+https://example.invalid/eps.git@abc",
            "-e git+https://example.invalid/zeta.git@abc#egg=zeta",
            "# Editable install with no version control (eta==0.1.dev0)",
            "-e /src/eta",
            "git+https://example.invalid/theta.git",
            "only_on_windows==1.0 ; sys_platform == 'win32'",
            "arbitrary===weird-1",
        ]
    )
    listing = parse_listing(
        text,
        file="list.txt",
        marker_env={"sys_platform": "linux", "python_version": "3.12"},
    )
    got = {e.name: (e.version, e.how, e.spec) for e in listing.entries}
    assert got == {
        "alpha": ("1.0", "pin", ""),
        "Beta_Pkg": (None, "range", "<3,>=2"),
        "gamma": (None, "range", ""),
        "delta": ("4.5.6", "url", ""),
        "eps": (None, "url", ""),
        "zeta": (None, "editable", ""),
        "eta": ("0.1.dev0", "editable", ""),
        "arbitrary": (None, "range", "===weird-1"),
    }
    assert len(listing.notes) == 1 and "list.txt:11" in listing.notes[0]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("this is not a requirement!", "Expected"),
        ("alpha==1.0\nALPHA==2.0", "listed twice (first on line 1)"),
        ("beta >= = 2", "Expected"),
    ],
)
def test_a_line_that_cannot_be_a_distribution_is_an_error(line: str, why: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_listing(line, file="bad.txt")
    assert exc.value.message.startswith("bad.txt:")
    assert why in exc.value.message
    assert exc.value.problems[0].file == "bad.txt"


def test_layering_keeps_satisfied_versions_and_forgets_the_rest() -> None:
    base = parse_listing("a==1.0\nb==1.0\nc==1.0\nd==1.0\ne==1.0\nf==1.0", file="base")
    over = parse_listing("a>=0.5\nb>=2\nc==3.0\nnew\ne", file="more")
    forced = parse_listing("d>=0.5\ne==1.0", file="post")
    forced = type(forced)(forced.file, forced.entries, forced.notes, reinstall=True)
    dists, notes = layer_listings([base, over, forced], uninstall=["f", "nothere"])
    got = {d.name: (d.version, d.note) for d in dists}
    assert got["a"] == ("1.0", None)  # satisfied: an installer keeps it
    assert got["b"][0] is None and "`b>=2` by more:2" in str(got["b"][1])
    assert got["b"][1] is not None and "over 1.0" in got["b"][1]
    assert got["c"] == ("3.0", "3.0 per more:3 (over 1.0)")
    assert got["new"][0] is None and "unpinned" in str(got["new"][1])
    assert got["d"][0] is None  # reinstalled: its range says nothing of the version
    assert got["e"] == ("1.0", None)
    assert "f" not in got
    assert notes == ["uninstall nothere: not in the listings"]


def test_facts_measured_and_given() -> None:
    dists, _ = layer_listings([parse_listing("torch==2.10.0+cu128\nnumpy==2.0.2", file="f")])
    snap = snapshot_from_listing(
        dists,
        HostFacts(
            python_version="3.12.13",
            driver="580.159.04",
            driver_cuda="13.0",
            nccl="2.27.5",
            gpus=(parse_gpu("Tesla T4,7.5,15360", 0), parse_gpu("Tesla T4", 1)),
            is_kaggle=True,
        ),
        sources=["f"],
    )
    assert snap.torch is not None
    assert (snap.torch.version, snap.torch.cuda, snap.torch.nccl) == (
        "2.10.0+cu128",
        "12.8",
        "2.27.5",
    )
    assert snap.driver is not None and snap.driver.cuda_max == "13.0"
    assert [(g.index, g.compute_capability, g.memory_mib) for g in snap.gpus] == [
        (0, "7.5", 15360),
        (1, None, None),
    ]
    with pytest.raises(InputError, match="which Python") as exc:
        snapshot_from_listing(dists, HostFacts(), sources=["f"])
    assert exc.value.hint is not None and "--python-version" in exc.value.hint
    with pytest.raises(InputError, match="compute capability"):
        parse_gpu("Tesla T4,seven", 0)
    assert torch_cuda_of("2.11.0+cu130") == "13.0"
    assert torch_cuda_of("2.11.0") is None and torch_cuda_of("2.11.0+cpu") is None


def test_cli_errors_are_one_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "freeze.txt"
    bad.write_text("ok==1.0\n???\n")
    code, out, err = run(
        capsys, "fingerprint", "--from-freeze", str(bad), "--python-version", "3.12"
    )
    assert code == 2 and out == ""
    assert "freeze.txt:2: not a distribution line" in err and "Traceback" not in err
    code, _, err = run(capsys, "fingerprint", "--from-freeze", str(tmp_path / "none.txt"))
    assert code == 2 and "package listing not found" in err
    code, _, err = run(capsys, "fingerprint", "--glibc", "2.35")
    assert code == 2 and "--glibc: only meaningful with --from-freeze" in err


def test_fingerprint_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    listing = tmp_path / "l.txt"

    def save(lines: str, python: str, path: Path) -> int:
        listing.write_text(lines)
        argv = ["--from-freeze", str(listing), "--python-version", python, "--save", str(path)]
        return main(["fingerprint", *argv, "--json"])

    assert save("torch==2.10.0+cu128\nfsspec==2025.3.0\ngone==1.0\n", "3.12.13", old) == 0
    assert save("torch==2.11.0+cu128\nfsspec==2026.9.0\nadded==2.0\n", "3.13.15", new) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "fingerprint", "--diff", str(old), "--host", str(new))
    assert code == 1
    assert "python 3.12.13 -> 3.13.15" in out
    assert "torch 2.10.0+cu128 -> 2.11.0+cu128" in out
    assert "distributions: 1 changed, 1 added, 1 removed" in out
    assert "fsspec 2025.3.0 -> 2026.9.0" in out and "added added (2.0)" in out
    assert "gone removed (was 1.0)" in out
    code, out, _ = run(capsys, "fingerprint", "--diff", str(old), "--host", str(old), "--json")
    assert code == 0 and json.loads(out)["same"] is True
