"""A stand-in for the ``vllm serve`` executable: ``python fake_serve.py serve MODEL [options]``.

Behaviour is chosen by ``FAKE_VLLM_MODE``:
- ``ok`` (default): wait ``FAKE_VLLM_DELAY`` seconds (a slow start), then listen and answer
  ``GET /health`` with 200 and ``GET /v1/models`` (bearer key checked against VLLM_API_KEY);
  SIGTERM exits 0.
- ``exit``: print an error (and, with ``FAKE_VLLM_LEAK=1``, the API key) and exit 3.
- ``503``: listen, but ``/health`` always answers 503 (a dead engine).
- ``ignore-term``: like ``ok`` but SIGTERM is ignored (only SIGKILL stops it).
- ``worker``: like ``ok`` and also starts a worker process in the same process group that
  ignores SIGTERM and outlives the leader.
- ``engine``: like ``ok``, shaped like vLLM's API server: once listening it starts an "engine
  core" child that inherits the listening socket and itself starts a "worker" grandchild (both
  stop on SIGTERM, as vLLM's do). A process of the tree left running keeps the port open.
``FAKE_VLLM_RECORD`` names a JSON file where it writes its argv, pid, worker pid and
environment facts (the API key only as a sha256).
"""

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_VLLM_MODE", "ok")
KEY = os.environ.get("VLLM_API_KEY")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(503 if MODE == "503" else 200, b"")
        elif self.path == "/v1/models":
            if KEY and self.headers.get("Authorization") != f"Bearer {KEY}":
                self._answer(401, b'{"error":"Unauthorized"}')
            else:
                self._answer(200, json.dumps({"data": [{"id": MODEL}]}).encode())
        else:
            self._answer(404, b"")

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        sys.stdout.write("fake-vllm: " + (format % args) + "\n")
        sys.stdout.flush()


def main() -> int:
    global MODEL
    if sys.argv[1:2] == ["--worker"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
        return 0
    if sys.argv[1:2] == ["--engine"]:  # holds the listening socket (argv[2]); starts a worker
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        held = socket.socket(fileno=int(sys.argv[2]))
        child = subprocess.Popen([sys.executable, __file__, "--engine-worker"])
        print(f"fake-vllm: engine core {os.getpid()} (worker {child.pid})", flush=True)
        time.sleep(600)
        held.close()
        return 0
    if sys.argv[1:2] == ["--engine-worker"]:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        time.sleep(600)
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--host", default="")
    parser.add_argument("--port", type=int, default=8000)
    args, _ = parser.parse_known_args()
    MODEL = args.model
    record: dict[str, object] = {
        "argv": sys.argv[1:],
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "api_key_sha256": hashlib.sha256(KEY.encode()).hexdigest() if KEY else None,
        "attention_env": os.environ.get("VLLM_ATTENTION_BACKEND"),
        "profile_env": os.environ.get("FAKE_PROFILE_ENV"),
    }
    print(f"fake-vllm: starting {args.model} ({MODE})", flush=True)
    if MODE == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if MODE == "worker":
        worker = subprocess.Popen([sys.executable, __file__, "--worker"])
        record["worker_pid"] = worker.pid
    if os.environ.get("FAKE_VLLM_RECORD"):
        with open(os.environ["FAKE_VLLM_RECORD"], "w") as handle:
            json.dump(record, handle)
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0.5")))
    if MODE == "exit":
        if os.environ.get("FAKE_VLLM_LEAK") and KEY:
            print(f"fake-vllm: config api_key={KEY}", flush=True)
        print("fake-vllm: ValueError: CUDA out of memory while loading weights", flush=True)
        return 3
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"fake-vllm: Starting vLLM server on http://{args.host}:{args.port}", flush=True)
    if MODE == "engine":
        fd = server.socket.fileno()
        engine = subprocess.Popen([sys.executable, __file__, "--engine", str(fd)], pass_fds=(fd,))
        record["engine_pid"] = engine.pid
        if os.environ.get("FAKE_VLLM_RECORD"):
            with open(os.environ["FAKE_VLLM_RECORD"], "w") as handle:
                json.dump(record, handle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    while True:
        time.sleep(1)


MODEL = ""

if __name__ == "__main__":
    sys.exit(main())
