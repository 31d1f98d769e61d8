"""sha256 throughput and memory: kvenv's ``sha256_file`` against a bare ``hashlib`` loop
(1 MiB ``read`` calls), ``hashlib.file_digest`` (Python 3.11+) and coreutils ``sha256sum``.

    python benchmarks/hashing.py [--size-mb 336] [--rounds 9] [--output PATH]

A random file of ``--size-mb`` MB (the native vLLM wheel is 384 MB) is written to a temporary
directory and read once, so every contender reads from the page cache. Each measurement runs in
its own child process, which reports the time of the hash alone and its peak RSS
(``resource.getrusage``); ``sha256sum`` runs as the child of a small Python wrapper that reads
``RUSAGE_CHILDREN``. Rounds are interleaved (every contender once per round) and medians are
reported (and the best round, the least disturbed by other load on the machine), with MB/s and
each contender's throughput relative to the bare loop. A child that
only imports its module gives the baseline RSS, so "extra RSS" is what hashing itself costs.
The aim: kvenv at no less than 90% of the bare loop, with flat memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
AIM = 0.90

# Peak RSS: VmHWM of this process image (Linux). ``ru_maxrss`` would be wrong here: Linux carries
# the parent's high-water mark across fork and exec.
_PEAK = """
def peak_kb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    import resource
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

_PYTHON_CHILD = (
    """
import json, sys, time
path = sys.argv[1]
{setup}
start = time.perf_counter()
{run}
elapsed = time.perf_counter() - start
"""
    + _PEAK.replace("{", "{{").replace("}", "}}")
    + """
print(json.dumps({{"seconds": elapsed, "digest": digest, "maxrss_kb": peak_kb()}}))
"""
)

CONTENDERS: dict[str, tuple[str, str]] = {
    "kvenv sha256_file": (
        "from kvenv._util.hashing import sha256_file",
        "digest = sha256_file(path)[0]",
    ),
    "bare hashlib loop (1 MiB reads)": (
        "import hashlib",
        "h = hashlib.sha256()\n"
        "with open(path, 'rb') as f:\n"
        "    while block := f.read(1 << 20):\n"
        "        h.update(block)\n"
        "digest = h.hexdigest()",
    ),
    "hashlib.file_digest": (
        "import hashlib",
        "with open(path, 'rb') as f:\n    digest = hashlib.file_digest(f, 'sha256').hexdigest()",
    ),
}

# sha256sum's peak RSS comes from GNU time (%M) when present: a tiny parent, so the inherited
# high-water mark is negligible.
_SHA256SUM_CHILD = """
import json, os, resource, subprocess, sys, time
timer = ["/usr/bin/time", "-f", "%M"] if os.path.exists("/usr/bin/time") else []
start = time.perf_counter()
out = subprocess.run([*timer, "sha256sum", sys.argv[1]], check=True, capture_output=True,
                     text=True)
elapsed = time.perf_counter() - start
rss = float(out.stderr.split()[-1]) if timer else float(
    resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"seconds": elapsed, "digest": out.stdout.split()[0], "maxrss_kb": rss}))
"""


def _child(code: str, path: Path) -> dict[str, float | str]:
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True
    )
    result: dict[str, float | str] = json.loads(done.stdout)
    return result


def _code(name: str) -> str:
    setup, run = CONTENDERS[name]
    return _PYTHON_CHILD.format(setup=setup, run=run)


def _baseline_kb(setup: str, path: Path) -> float:
    code = _PYTHON_CHILD.format(setup=setup, run="digest = ''")
    return float(_child(code, path)["maxrss_kb"])


def _write_random(path: Path, size_mb: int) -> None:
    block = 1 << 20
    total = size_mb * 1_000_000
    with open(path, "wb") as handle:
        written = 0
        while written < total:
            chunk = os.urandom(min(block, total - written))
            handle.write(chunk)
            written += len(chunk)
    with open(path, "rb") as handle:  # warm the page cache
        while handle.read(1 << 24):
            pass


def measure(size_mb: int, rounds: int) -> dict[str, object]:
    names = [n for n in CONTENDERS if n != "hashlib.file_digest" or sys.version_info >= (3, 11)]
    has_sha256sum = shutil.which("sha256sum") is not None
    with tempfile.TemporaryDirectory(prefix="kvenv-bench-") as tmp:
        path = Path(tmp) / "blob.bin"
        _write_random(path, size_mb)
        size = path.stat().st_size
        samples: dict[str, list[dict[str, float | str]]] = {n: [] for n in names}
        if has_sha256sum:
            samples["sha256sum"] = []
        for _ in range(rounds):
            for name in names:
                samples[name].append(_child(_code(name), path))
            if has_sha256sum:
                samples["sha256sum"].append(_child(_SHA256SUM_CHILD, path))
        baselines = {name: _baseline_kb(CONTENDERS[name][0], path) for name in names}
    digests = {str(s["digest"]) for runs in samples.values() for s in runs}
    if len(digests) != 1:
        raise SystemExit(f"contenders disagree on the digest: {sorted(digests)}")
    results: dict[str, dict[str, float]] = {}
    for name, runs in samples.items():
        seconds = statistics.median(float(r["seconds"]) for r in runs)
        best = min(float(r["seconds"]) for r in runs)
        peak_kb = max(float(r["maxrss_kb"]) for r in runs)
        entry = {
            "median_s": round(seconds, 4),
            "mb_per_s": round(size / 1e6 / seconds, 1),
            "best_mb_per_s": round(size / 1e6 / best, 1),
            "peak_rss_mb": round(peak_kb / 1024, 1),
        }
        if name in baselines:
            entry["extra_rss_mb"] = round((peak_kb - baselines[name]) / 1024, 1)
        results[name] = entry
    bare = results["bare hashlib loop (1 MiB reads)"]
    for entry in results.values():
        entry["vs_bare_loop"] = round(entry["mb_per_s"] / bare["mb_per_s"], 3)
        entry["best_vs_bare_loop"] = round(entry["best_mb_per_s"] / bare["best_mb_per_s"], 3)
    kvenv_ratio = results["kvenv sha256_file"]["vs_bare_loop"]
    return {
        "benchmark": "sha256 of one file from the page cache",
        "file_bytes": size,
        "rounds": rounds,
        "python": platform.python_version(),
        "openssl": ssl.OPENSSL_VERSION,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "results": results,
        "aim": f"kvenv >= {AIM:.0%} of the bare loop's throughput, flat memory",
        "aim_met": kvenv_ratio >= AIM,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=336)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "hashing.json")
    args = parser.parse_args()
    report = measure(args.size_mb, args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    results = report["results"]
    assert isinstance(results, dict)
    print(f"{report['file_bytes'] / 1e6:.0f} MB, {report['rounds']} rounds, medians")
    for name, entry in results.items():
        extra = f", +{entry['extra_rss_mb']} MB" if "extra_rss_mb" in entry else ""
        print(
            f"  {name:<32} median {entry['mb_per_s']:>7.1f} MB/s x{entry['vs_bare_loop']:<6}"
            f" best {entry['best_mb_per_s']:>7.1f} MB/s x{entry['best_vs_bare_loop']:<6}"
            f" peak RSS {entry['peak_rss_mb']} MB{extra}"
        )
    print(f"aim met: {report['aim_met']} ({report['aim']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
