"""What each download costs kvenv itself, without the network: N files fetched from an https
server on loopback into an empty cache, for several kvenv installs side by side (issue 25: a
connection per file against a pooled keep-alive client). The server's self-signed certificate
is trusted through ``SSL_CERT_FILE``: a copy of the system's certificate store with it added,
so loading the store costs what it costs on a real machine.

    python benchmarks/fetch_loopback.py --kvenv LABEL=PATH [--kvenv ...] [--files 91]
        [--size 65536] [--jobs 8] [--rounds 5] [--out PATH.json]

Each run is a child of that kvenv's interpreter calling ``kvenv.fetch.fetch_all`` on the
files' https URLs; the server runs in this process (its handshakes are not in the child's CPU)
and counts the connections. Rounds alternate; medians of wall and CPU (user + sys of the
child). Needs ``openssl`` to make the certificate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import python_of, run_child, run_facts, write_results

from tests.support.hubserver import HubServer

REPO = Path(__file__).resolve().parent.parent

FETCH = r"""
import json, sys
from pathlib import Path
from kvenv.fetch import fetch_all
from kvenv.plan.artifacts import Artifact
files, cache, jobs = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), int(sys.argv[3])
wanted = [Artifact(f"f{i}", "1.0", f"f{i}-1.0-py3-none-any.whl", sha, size, "overlay", url)
          for i, (url, sha, size) in enumerate(files)]
assert len(fetch_all(wanted, cache=cache, jobs=jobs)) == len(wanted)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--files", type=int, default=91)
    parser.add_argument("--size", type=int, default=65536)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tmp", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/fetch-loopback.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kvenv-fetch-loopback-", dir=args.tmp))
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    script = work / "fetch.py"
    script.write_text(FETCH)
    strip = ("PIP_", "UV_", "KVENV_", "VIRTUAL_ENV", "SSL_CERT_", "HTTP_PROXY", "HTTPS_PROXY")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(strip)}
    # the system's certificate store and the server's certificate: what loading it costs per
    # connection is part of what is measured
    system = Path(ssl.get_default_verify_paths().openssl_cafile)
    store = work / "store.pem"
    store.write_bytes((system.read_bytes() if system.is_file() else b"") + cert.read_bytes())
    env["SSL_CERT_FILE"] = str(store)
    runs = []
    for item in args.kvenv:
        label, _, path = item.partition("=")
        runs.append((f"kvenv[{label}]", python_of(Path(path).resolve())))
    samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in runs}
    with HubServer(tls=context) as server:
        files = []
        for number in range(args.files):
            data = os.urandom(args.size)
            url = server.add_static(f"/files/f{number}-1.0-py3-none-any.whl", data)
            files.append((url, hashlib.sha256(data).hexdigest(), len(data)))
        listing = work / "files.json"
        listing.write_text(json.dumps(files))
        for number in range(args.rounds):
            for name, python in runs if number % 2 == 0 else runs[::-1]:
                cache = work / f"cache-{name}-{number}"
                before = server.connections
                argv = [python, str(script), str(listing), str(cache), str(args.jobs)]
                done = run_child(argv, env)
                shutil.rmtree(cache, ignore_errors=True)
                if done.returncode != 0:
                    raise SystemExit(f"{name} exited {done.returncode}: {done.stderr}")
                samples[name].append((done.wall, done.cpu, server.connections - before))
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    results = {
        name: {
            "wall_s": round(statistics.median(v[0] for v in values), 3),
            "cpu_s": round(statistics.median(v[1] for v in values), 3),
            "connections": statistics.median(v[2] for v in values),
            "walls": [round(v[0], 3) for v in values],
            "cpus": [round(v[1], 3) for v in values],
        }
        for name, values in samples.items()
    }
    data = {
        "benchmark": "fetch-loopback",
        "what": f"{args.files} files of {args.size} bytes over https on loopback into an empty "
        f"cache, {args.jobs} download workers",
        "kvenv": dict(item.partition("=")[::2] for item in args.kvenv),
        **run_facts(),
        "samples": results,
    }
    write_results(args.out, data)
    for name, row in results.items():
        print(
            f"{name:<16} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:6.2f} s  "
            f"connections {row['connections']}  {row['walls']}"
        )
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
