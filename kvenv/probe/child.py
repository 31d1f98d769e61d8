"""Facts about a Python interpreter, as that interpreter sees them. Stdlib only.

This module runs in two ways: imported (facts of the interpreter kvenv runs in) and as the
source of ``python -I -c <this file> `` in *another* interpreter (the host's Python when kvenv
lives in its own venv), which prints the same facts as one JSON line. It must therefore import
nothing outside the standard library and keep working on every Python 3 kvenv may probe.

``-I`` (isolated mode) keeps the probe honest: ``PYTHON*`` variables (PYTHONPATH included) and
the user's site directory are ignored and the current directory is not on ``sys.path``, so the
result is the interpreter's own base environment, not what a shell session added to it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import sysconfig

FACTS_VERSION = 1


def _abis() -> list[str]:
    """The interpreter's ABI tags, most specific first (as ``packaging.tags`` derives them)."""
    nodot = str(sysconfig.get_config_var("py_version_nodot") or "")
    if not nodot:
        nodot = f"{sys.version_info[0]}{sys.version_info[1]}"
    if sys.implementation.name == "cpython":
        debug_var = sysconfig.get_config_var("Py_DEBUG")
        debug = bool(debug_var) or (debug_var is None and hasattr(sys, "gettotalrefcount"))
        threading = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
        abis = [f"cp{nodot}{threading}{'d' if debug else ''}"]
        if debug:
            abis.append(f"cp{nodot}{threading}")
        return abis
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not isinstance(suffix, str) or suffix.count(".") < 2:
        return []
    soabi = suffix.split(".")[1]
    if soabi.startswith("pypy"):
        soabi = "-".join(soabi.split("-")[:2])
    elif soabi.startswith("graalpy"):
        soabi = "-".join(soabi.split("-")[:3])
    return [soabi.replace(".", "_").replace("-", "_").lower()] if soabi else []


def facts() -> dict[str, object]:
    """The interpreter's identity and import path, as plain JSON-able values."""
    return {
        "facts_version": FACTS_VERSION,
        "version": platform.python_version(),
        "version_info": [sys.version_info[0], sys.version_info[1]],
        "implementation": sys.implementation.name,
        "py_version_nodot": str(sysconfig.get_config_var("py_version_nodot") or ""),
        "abis": _abis(),
        "executable": sys.executable,
        "sys_path": [entry for entry in sys.path if entry and entry != os.getcwd()],
        "sys_platform": sys.platform,
        "machine": platform.machine(),
        "sysconfig_platform": sysconfig.get_platform(),
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    }


def main() -> None:
    sys.stdout.write(json.dumps(facts()) + "\n")


if __name__ == "__main__":
    main()
