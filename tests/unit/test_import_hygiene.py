"""``import kvenv`` and the light commands import nothing heavy and do no I/O beyond reading.

Each check runs in a fresh interpreter, so modules other tests imported do not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("vllm", "torch", "huggingface_hub", "resolvelib", "unearth", "installer")

PROBE = """
import json, sys
HEAVY = {heavy!r}
{action}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
print("\\n" + json.dumps(loaded))
"""


def _heavy_modules_after(action: str) -> list[str]:
    code = PROBE.format(heavy=HEAVY, action=textwrap.dedent(action))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVENV_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_probe_sees_a_heavy_import() -> None:
    assert "resolvelib" in _heavy_modules_after("import resolvelib")


def test_import_kvenv_is_light() -> None:
    assert _heavy_modules_after("import kvenv") == []


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["validate", "kaggle-t4x2-cu128"], ["schema", "profile"]],
    ids=lambda a: " ".join(a),
)
def test_light_commands_import_nothing_heavy(argv: list[str]) -> None:
    action = f"""
    from kvenv.cli import main
    try:
        code = main({argv!r})
    except SystemExit as done:
        code = done.code
    assert code == 0, code
    """
    assert _heavy_modules_after(action) == []


AUDIT = """
import os, sys
events = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def hook(event, args):
    if event.startswith(("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn")):
        events.append(event)
    elif event in ("os.system", "os.fork", "os.forkpty", "ctypes.dlopen", "urllib.Request"):
        events.append(event)
    elif event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE
        ):
            events.append(f"open for writing: {path}")
    elif event in ("os.remove", "os.rename", "os.mkdir", "shutil.rmtree", "os.chmod"):
        events.append(event)

sys.addaudithook(hook)
import kvenv
import kvenv.cli
print(repr(events))
"""


def test_import_kvenv_opens_no_socket_spawns_nothing_writes_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVENV_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", AUDIT], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"


def test_audit_probe_sees_a_socket() -> None:
    code = AUDIT.replace("import kvenv.cli", "import socket; socket.socket().close()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "socket." in done.stdout
