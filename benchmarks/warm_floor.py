"""The floor of a warm apply into a fresh root (issue 13, round 3): what a process that does
only the work a warm apply must do costs, against ``kvenv apply`` itself and ``uv pip install
--target`` of the same wheels, in one run, alternating rounds.

The floor is a child interpreter that imports the standard library only and, for every
distribution a generation made by ``kvenv apply`` holds (read from its manifest): reads the
store entry's marker and seal, checks the seal's directories and top, then creates every
directory and hard-links every file with each file's seal checked right before its link, on
two threads; writes each console script with its shebang and each rewritten RECORD (copied
from that generation), the manifest (the generation's, its root replaced), the pointer with
the manifest's sha256 and the activation scripts, under an ``flock`` of the root: the same
files, byte for byte, as the generation it copies (checked once by hand with ``find |
md5sum``). It plans nothing, probes nothing and reads no profile, lock or bundle: that is what
a recall of a whole generation (kept, like ``kvenv/env/answers.py``'s memo records, by everything
the full path reads) would leave. An experiment, not a feature: it answers how close to uv
such a recall could come before anyone builds it.

    python benchmarks/warm_floor.py --kvenv PATH --bundle DIR --cache DIR [--uv UV]
        [--rounds 9] [--host-python PY] [--no-compile] [--out benchmarks/results/warm-floor.json]

``--host-python`` is the host every tool installs for (a vLLM closure needs one with torch);
the floor runs on it too. ``--no-compile`` applies with ``kvenv apply --no-compile`` (no
bytecode linked, as uv writes none): like for like with uv; the floor copies that generation,
so it links none either.

``--cache`` must be warm for ``--bundle`` (one ``kvenv apply --offline --from BUNDLE`` with
``KVENV_CACHE_DIR=DIR`` made it so); the generation read is the one a first timed apply makes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import python_of, run_child, run_facts, tool_version, write_results

FLOOR = r"""
import array, base64, fcntl, hashlib, json, os, sys, threading
made, store, root = sys.argv[1:4]
mdata = open(made, "rb").read()
manifest = json.loads(mdata)
old_root, gen = manifest["root"], manifest["dirs"]["generation"]
os.makedirs(root)
lock = os.open(root + "/.kvenv.lock", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(lock, fcntl.LOCK_EX)
with open(root + "/.kvenv-root", "w") as f:
    json.dump({"kvenv": "floor", "owner": manifest["profile"]["name"]}, f)
g = f"{root}/generations/{gen}"
where = {k: v.replace(old_root, root, 1) for k, v in manifest["dirs"].items()}
by_dir, scripts, records = {}, [], []
# a file two wheels ship: the manifest's loser does not link it (kvenv keeps the winner's)
shadowed = {(c["loser"], c["layer"], c["file"]) for c in manifest.get("conflicts", [])}
def unpack(text):
    return array.array("q", base64.b64decode(text))
for dist in manifest["distributions"]:
    entry = f"{store}/{dist['wheel_sha256']}"
    files = json.loads(open(entry + "/.kvenv-store.json", "rb").read())["dist"]["files"]
    seal = json.loads(open(entry + "/.kvenv-seal.json", "rb").read())
    numbers = iter(unpack(seal["stats"]))
    sealed = dict(zip(seal["files"], zip(numbers, numbers, numbers)))
    for rel, ctime in zip(seal["dirs"], unpack(seal["ctimes"])):
        assert os.lstat(f"{entry}/{rel}").st_ctime_ns == ctime
    assert sorted(n for n in os.listdir(entry) if not n.startswith(".kvenv-")) == seal["top"]
    layer = where[dist["layer"]]
    rewrite = f"{dist['dist_info']}/RECORD" if dist["scripts"] else None
    for path in files:
        if path.startswith("../bin/"):
            scripts.append((f"{entry}/{path[3:]}", f"{where['bin']}/{path[7:]}"))
        elif path == rewrite:
            records.append(f"{layer}/{path}")
        elif (dist["name"], dist["layer"], path) in shadowed:
            continue
        else:
            top, _, rest = path[3:].partition("/")
            shared = path.startswith("../") and top in ("data", "include")
            dest = f"{g}/{top}/{rest}" if shared else f"{layer}/{path}"
            rel = path[3:] if shared else "site/" + path
            by_dir.setdefault(dest.rpartition("/")[0], []).append(
                (f"{entry}/{rel}", dest, sealed[rel]))
def run(batch):
    for d in batch:
        os.makedirs(d, exist_ok=True)
        for source, dest, (size, mode, mtime) in by_dir[d]:
            st = os.lstat(source)
            if st.st_size != size or st.st_mode & 0o7777 != mode or st.st_mtime_ns != mtime:
                raise SystemExit(f"unsealed: {source}")
            os.link(source, dest)
dirs = sorted(by_dir)
batches = [dirs[i::2] for i in range(2)]
threads = [threading.Thread(target=run, args=(b,)) for b in batches]
for t in threads: t.start()
for t in threads: t.join()
python = manifest["python"].encode()
os.makedirs(where["bin"], exist_ok=True)
for source, dest in scripts:
    data = open(source, "rb").read()
    if data.startswith(b"#!python"):
        data = b"#!" + python + b"\n" + data[data.find(b"\n") + 1:]
    with open(dest, "wb") as f: f.write(data)
    os.chmod(dest, 0o755)
for dest in records:
    text = open(dest.replace(root, old_root, 1), "rb").read()
    with open(dest, "wb") as f: f.write(text)
text = mdata.replace(old_root.encode(), root.encode())
with open(f"{g}/manifest.json", "wb") as f:
    f.write(text); f.flush(); os.fsync(f.fileno())
pointer = {"schema": 1, "generation": gen, "previous": None,
           "manifest_sha256": hashlib.sha256(text).hexdigest()}
with open(root + "/current.json.tmp", "w") as f:
    json.dump(pointer, f); f.flush(); os.fsync(f.fileno())
os.replace(root + "/current.json.tmp", root + "/current.json")
for name in ("activate.sh", "activate.fish", "activate.ps1"):
    shim = open(f"{old_root}/{name}", "rb").read().replace(old_root.encode(), root.encode())
    with open(f"{root}/{name}", "wb") as f: f.write(shim)
print(f"applied: generation {gen}")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kvenv", type=Path, required=True)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--host-python", type=Path, help="the host (default: kvenv's own)")
    parser.add_argument("--no-compile", action="store_true", help="kvenv apply --no-compile")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/warm-floor.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kvenv-floor-"))
    python = str(args.host_python or python_of(args.kvenv))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    counter = iter(range(1_000_000))
    wheels = sorted(str(p) for p in (args.bundle / "wheels").glob("*.whl"))

    def kvenv(root: Path) -> tuple[list[str], dict[str, str]]:
        env = dict(base, KVENV_ROOT=str(root), KVENV_CACHE_DIR=str(args.cache),
                   KVENV_PYTHON=python)  # fmt: skip
        flags = ["--no-compile"] if args.no_compile else []
        return [str(args.kvenv), "apply", *flags, "--offline", "--from", str(args.bundle)], env

    first = work / "made"
    command, env = kvenv(first)
    if run_child(command, env).returncode != 0:
        raise SystemExit("the first kvenv apply failed")
    made = next(first.glob("generations/*/manifest.json"))
    uv_cache = work / "uvcache"
    jobs = {
        "kvenv warm": lambda: kvenv(work / f"root-{next(counter)}"),
        "floor": lambda: (
            [
                python,
                "-c",
                FLOOR,
                str(made),
                str(args.cache / "store"),
                str(work / f"floor-{next(counter)}"),
            ],
            base,
        ),
    }
    if args.uv:
        uv_args = ["pip", "install", "--no-deps", "--offline", "--link-mode", "hardlink",
                   "--quiet", "--cache-dir", str(uv_cache), "--python", python]  # fmt: skip
        run_child([args.uv, *uv_args, "--target", str(work / "uv-fill"), *wheels], base)
        jobs["uv warm"] = lambda: (
            [args.uv, *uv_args, "--target", str(work / f"uv-{next(counter)}"), *wheels],
            base,
        )
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
    names = list(jobs)
    for number in range(args.rounds):
        for name in names if number % 2 == 0 else reversed(names):
            command, env = jobs[name]()
            done = run_child(command, env)
            if done.returncode != 0:
                raise SystemExit(f"{name} failed: {done.stderr[-2000:]}")
            samples[name].append((done.wall, done.user))
    results = {
        name: {
            "wall_s": round(statistics.median(w for w, _ in values), 4),
            "user_cpu_s": round(statistics.median(u for _, u in values), 4),
            "walls": [round(w, 4) for w, _ in values],
        }
        for name, values in samples.items()
    }
    ratios = {}
    if "uv warm" in results:
        for name in ("kvenv warm", "floor"):
            ratios[f"{name}/uv"] = round(results[name]["wall_s"] / results["uv warm"]["wall_s"], 2)
    write_results(
        args.out,
        {
            "benchmark": "warm-floor",
            "what": "a warm apply into a fresh root: kvenv, the stdlib-only floor, uv",
            "kvenv": str(args.kvenv),
            "no_compile": args.no_compile,
            "uv": tool_version(args.uv),
            **run_facts(),
            "samples": results,
            "ratios": ratios,
        },
    )
    for name, row in results.items():
        print(f"{name:<12} wall {row['wall_s']:.3f} s  user {row['user_cpu_s']:.3f} s")
    for name, value in ratios.items():
        print(f"{name:<16} {value}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
