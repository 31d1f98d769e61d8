"""Helpers for the lock engine's tests: a project with a profile, a host snapshot and a native
wheel; a wheelhouse of small real wheels; and a loopback simple index (PEP 503 HTML, PEP 691
JSON, PEP 658 metadata, range requests)."""

from __future__ import annotations

import hashlib
import html
import json
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from kvenv.model.loading import LoadedProfile, load_profile
from tests.support.wheels import build_wheel, sha256_of

NATIVE_TAG = "cp312-cp312-manylinux_2_17_x86_64"
CUDA_TAG = "cp312-cp312-manylinux_2_28_x86_64"
# Index settings pip/uv read from the environment; tests and benchmarks scrub them.
INDEX_ENV = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "UV_FIND_LINKS",
)

# The host's torch in the tests' snapshots (a CPU build; its own requirement, filelock).
HOST_TORCH: dict[str, Any] = {"name": "torch", "version": "2.10.0+cpu", "requires": ["filelock"]}


def isolate_index_env(monkeypatch: Any, cache: Path) -> None:
    """No index setting from the environment (pip's, uv's), and ``KVENV_CACHE_DIR`` at
    ``cache``: a lock test sees only the index and cache it sets up."""
    for key in INDEX_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("KVENV_CACHE_DIR", str(cache))


def write_project(
    root: Path,
    *,
    name: str = "testbox",
    native_requires: Sequence[str] = ("torch==2.10.0", "alpha>=1.0"),
    native_extras: Mapping[str, Sequence[str]] | None = None,
    distributions: Sequence[Mapping[str, Any]] = (),
    protected: Sequence[str] = ("torch", "torchvision", "torchaudio"),
    waivers: Sequence[tuple[str, str]] = (),
    glibc: str = "2.35",
    python: str = "3.12.13",
) -> LoadedProfile:
    """A project directory with ``profiles/<name>.toml``, its host snapshot and native wheel."""
    (root / "profiles").mkdir(parents=True, exist_ok=True)
    native = build_wheel(
        root / "native",
        "nativepkg",
        "1.0.0+cu128",
        requires=native_requires,
        extras=native_extras,
        tag=NATIVE_TAG,
    )
    snapshot = {
        "schema": 1,
        "python": {"version": python, "abi": "cp312"},
        "platform": {"os": "linux", "machine": "x86_64", "libc": "glibc", "libc_version": glibc},
        "distributions": list(distributions),
        "source": "recorded",
    }
    (root / "profiles" / f"{name}.host.json").write_text(json.dumps(snapshot, indent=2))
    waiver_text = "".join(f'\n[[host.waivers]]\nname = "{w}"\nreason = "{r}"\n' for w, r in waivers)
    protected_list = ", ".join(f'"{p}"' for p in protected)
    (root / "profiles" / f"{name}.toml").write_text(
        f"""schema = 1
name = "{name}"

[target]
python = "{python}"
abi = "cp312"
os = "linux"
machine = "x86_64"
glibc = "{glibc}"

[host]
snapshot = "profiles/{name}.host.json"
protected = [{protected_list}]
{waiver_text}
[native]
name = "nativepkg"
version = "1.0.0+cu128"
sha256 = "{sha256_of(native)}"

[native.source]
kind = "path"
path = "native/{native.name}"
"""
    )
    return load_profile(str(root / "profiles" / f"{name}.toml"))


def torch_family(house: Path) -> None:
    """A fake torch with a CPU and a CUDA variant; the CUDA one drags nvidia-* libraries."""
    build_wheel(house, "torch", "2.10.0+cpu", requires=["filelock"], tag=NATIVE_TAG)
    build_wheel(
        house,
        "torch",
        "2.10.0",
        requires=["filelock", 'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"'],
        tag=CUDA_TAG,
    )
    build_wheel(
        house,
        "torch",
        "2.13.0",
        requires=["filelock", 'nvidia-cublas-cu12==12.9.1; platform_system == "Linux"'],
        tag=CUDA_TAG,
    )
    build_wheel(house, "nvidia-cublas-cu12", "12.8.4.1", tag="py3-none-manylinux_2_27_x86_64")
    build_wheel(house, "nvidia-cublas-cu12", "12.9.1", tag="py3-none-manylinux_2_27_x86_64")
    build_wheel(house, "filelock", "3.16.1")


def basic_house(house: Path) -> Path:
    """alpha needs beta (and six only on Python > 3.11, gamma only on Windows); beta has an
    extra; a native-tagged wheel, a too-new one for glibc 2.17 and a cp311-only one."""
    torch_family(house)
    build_wheel(
        house,
        "alpha",
        "1.0.0",
        requires=[
            "beta[fast]>=2",
            'six>=1.16; python_version > "3.11"',
            'gamma; sys_platform == "win32"',
        ],
    )
    build_wheel(house, "alpha", "0.9.0", requires=["beta"])
    build_wheel(house, "beta", "2.1.0", extras={"fast": ["delta>=1"]}, tag=NATIVE_TAG)
    build_wheel(
        house,
        "beta",
        "2.2.0",
        extras={"fast": ["delta>=1"]},
        tag="cp312-cp312-manylinux_2_39_x86_64",
    )
    build_wheel(house, "beta", "1.0.0")
    build_wheel(house, "delta", "1.5.0", tag="cp312-abi3-manylinux_2_17_x86_64")
    build_wheel(house, "delta", "1.6.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    build_wheel(house, "six", "1.17.0")
    build_wheel(house, "gamma", "1.0.0")
    return house


def _metadata(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(member)


class _Handler(BaseHTTPRequestHandler):
    house: Path
    json_api: bool = True
    pep658: bool = True
    hashes: bool = True
    upload_times: Mapping[str, str] = {}
    on_request: Callable[[str], None] | None = None
    etags: bool = True  # project pages carry an ETag; a matching If-None-Match gets a 304
    sha256_override: str | None = None  # the sha256 every page publishes (an impostor index)
    log: list[tuple[str, int]] | None = None  # (path, status) of every answer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(
        self, status: int, body: bytes, content_type: str, extra: Mapping[str, str] = {}
    ) -> None:
        if self.log is not None:
            self.log.append((self.path, status))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if self.on_request is not None:
            self.on_request(self.path)  # a test's log or gate: may block this request
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            return self._project(parts[1])
        if len(parts) == 2 and parts[0] == "files":
            return self._file(parts[1])
        self._send(404, b"not found", "text/plain")

    def _wheels(self, project: str) -> list[Path]:
        return sorted(
            p
            for p in self.house.glob("*.whl")
            if parse_wheel_filename(p.name)[0] == canonicalize_name(project)
        )

    def _project(self, project: str) -> None:
        wheels = self._wheels(project)
        if not wheels:
            return self._send(404, b"no such project", "text/plain")
        accept = self.headers.get("Accept", "")
        if self.json_api and "application/vnd.pypi.simple.v1+json" in accept:
            files = []
            for wheel in wheels:
                entry: dict[str, Any] = {
                    "filename": wheel.name,
                    "url": f"/files/{wheel.name}",
                    "hashes": {"sha256": self._sha256(wheel)} if self.hashes else {},
                    "size": wheel.stat().st_size,
                    "upload-time": self.upload_times.get(wheel.name, "2025-01-01T00:00:00Z"),
                }
                if self.pep658:
                    digest = hashlib.sha256(_metadata(wheel)).hexdigest()
                    entry["core-metadata"] = {"sha256": digest}
                files.append(entry)
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files})
            return self._page(body.encode(), "application/vnd.pypi.simple.v1+json")
        links = []
        for wheel in wheels:
            frag = f"#sha256={self._sha256(wheel)}" if self.hashes else ""
            attrs = ""
            if self.pep658:
                digest = hashlib.sha256(_metadata(wheel)).hexdigest()
                attrs = f' data-core-metadata="sha256={digest}"'
            links.append(
                f'<a href="/files/{html.escape(wheel.name)}{frag}"{attrs}>{wheel.name}</a>'
            )
        body = "<!DOCTYPE html><html><body>" + "<br>".join(links) + "</body></html>"
        self._page(body.encode(), "text/html")

    def _sha256(self, wheel: Path) -> str:
        return self.sha256_override or sha256_of(wheel)

    def _page(self, body: bytes, content_type: str) -> None:
        """A project page, with an ETag of its bytes and form; 304 when the client has it."""
        if not self.etags:
            return self._send(200, body, content_type)
        etag = '"' + hashlib.sha256(content_type.encode() + b"\n" + body).hexdigest()[:16] + '"'
        if self.headers.get("If-None-Match") == etag:
            return self._send(304, b"", content_type, {"ETag": etag})
        self._send(200, body, content_type, {"ETag": etag})

    def _file(self, filename: str) -> None:
        if filename.endswith(".metadata"):
            wheel = self.house / filename[: -len(".metadata")]
            if not self.pep658 or not wheel.is_file():
                return self._send(404, b"", "text/plain")
            return self._send(200, _metadata(wheel), "application/octet-stream")
        path = self.house / filename
        if not path.is_file():
            return self._send(404, b"", "text/plain")
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            if not first:
                start, end = max(0, len(data) - int(last)), len(data) - 1
            else:
                start, end = int(first), min(len(data) - 1, int(last) if last else len(data) - 1)
            headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
            return self._send(206, data[start : end + 1], "application/octet-stream", headers)
        self._send(200, data, "application/octet-stream")


@contextmanager
def serve_index(
    house: Path,
    *,
    json_api: bool = True,
    pep658: bool = True,
    hashes: bool = True,
    on_request: Callable[[str], None] | None = None,
    etags: bool = True,
    sha256_override: str | None = None,
    log: list[tuple[str, int]] | None = None,
) -> Iterator[str]:
    """Serve ``house`` as a simple index on 127.0.0.1; yields the index URL. ``on_request``
    sees each request's path first (from the server's threads, so it may block one); ``log``
    receives each answer's path and status. Project pages are PEP 691 JSON when asked for it
    (``json_api``), else PEP 503 HTML, with an ETag (``etags``) honoured by a 304."""
    handler = type(
        "Handler",
        (_Handler,),
        {
            "house": house,
            "json_api": json_api,
            "pep658": pep658,
            "hashes": hashes,
            "on_request": staticmethod(on_request) if on_request else None,
            "etags": etags,
            "sha256_override": sha256_override,
            "log": log,
        },
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
