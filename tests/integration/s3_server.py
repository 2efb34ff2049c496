"""A real S3-compatible server for the tests: moto's S3 server (``moto[s3]`` with Flask, test
dependencies that ``scripts/setup.sh`` installs with the project) in its own process on a
free 127.0.0.1 port, spoken to over HTTP by delta-rs, pyarrow and boto3 as any S3 endpoint.

moto honours ``If-None-Match: *`` on PutObject (the second conditional put of a key gets
412), which is what delta-rs's lock-free commit on S3 rests on. But its threaded server
checks and then writes without a lock: measured here, 1 round in 20 of 8 writers racing to
create one key had two winners. S3 itself is linearizable, so this server takes one request
at a time (``serve``: moto's app behind a lock), and ``test_s3_warehouse.py`` proves that
racing conditional puts have exactly one winner. Without moto installed ``start_server``
raises ``S3ServerMissing`` saying what to run, and the tests that need it fail with it (they
do not skip).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

#: The credentials and region the tests' clients use (moto accepts any by default).
ACCESS_KEY = "lakestate-test"
SECRET_KEY = "lakestate-test-secret"
REGION = "us-east-1"

#: When set (in the environment ``start_server`` is called in), the server appends a line per
#: request to this file: its start and end (``time.monotonic()``, which is the same clock in
#: every process of the machine), method, path and query, status. For the benchmarks'
#: request counts per step.
REQUEST_LOG_ENV = "LAKESTATE_S3_REQUEST_LOG"


class S3ServerMissing(RuntimeError):
    """moto's server is not installed in the venv: scripts/setup.sh installs it."""


class S3ServerDidNotStart(RuntimeError):
    """The server exited or did not answer in time; the message has its output."""


@dataclass
class S3Server:
    """A running server: ``endpoint`` (``http://127.0.0.1:PORT``), ``env()`` for clients,
    ``create_bucket``, ``stop()``."""

    endpoint: str
    directory: Path
    process: subprocess.Popen
    start_seconds: float  # from the process's start to its first answer

    def env(self) -> dict[str, str]:
        """The environment that points delta-rs, pyarrow and boto3 at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (through pyarrow's S3 client, as any client would)."""
        from pyarrow import fs

        client = fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            scheme="http",
            endpoint_override=self.endpoint.removeprefix("http://"),
            allow_bucket_creation=True,
        )
        client.create_dir(name)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM; SIGKILL if it takes longer than ``timeout``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process: SIGKILL it when the test session that started it dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"(no {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_server(directory: Path, timeout: float = 60.0, authenticate: bool = False) -> S3Server:
    """Start moto's S3 server on a free 127.0.0.1 port, its output in ``directory``;
    returns once it answers. ``authenticate``: every request's credentials are checked
    against the server's IAM (which knows none: every key is refused), as AWS does; else
    any credentials are accepted. ``S3ServerMissing`` without moto, ``S3ServerDidNotStart``
    (with its output's end) if it exits or does not answer in ``timeout``."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise S3ServerMissing(
            "moto's S3 server is not installed (moto[server], a test dependency): run "
            "scripts/setup.sh, or .venv/bin/pip install -e '.[test]'"
        )
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    output = directory / "s3-server.out"
    env = dict(os.environ)
    if authenticate:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    started = time.monotonic()
    with open(output, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, __file__, "127.0.0.1", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    server = S3Server(f"http://127.0.0.1:{port}", directory, process, 0.0)
    try:
        _wait_ready(server, output, started + timeout)
    except BaseException:
        server.stop(timeout=5)
        raise
    server.start_seconds = time.monotonic() - started
    return server


def _wait_ready(server: S3Server, output: Path, deadline: float) -> None:
    while True:
        code = server.process.poll()
        if code is not None:
            raise S3ServerDidNotStart(
                f"the S3 server exited ({code}) while starting; its output ends:\n{_tail(output)}"
            )
        try:
            with urllib.request.urlopen(f"{server.endpoint}/", timeout=2) as answer:
                answer.read()
                return
        except urllib.error.HTTPError:  # an answer, even a refusal: it is up
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise S3ServerDidNotStart(
                f"the S3 server did not answer on {server.endpoint} in time; its output "
                f"ends:\n{_tail(output)}"
            )
        time.sleep(0.1)


def serve(host: str, port: int) -> None:
    """The server's process: moto's S3 app answering one request at a time, so that a
    conditional put's check and write are atomic, as on S3 (moto's own server is threaded
    and checks without a lock)."""
    import threading

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    request_log = os.environ.get(REQUEST_LOG_ENV)
    log_file = open(request_log, "a", buffering=1) if request_log else None  # noqa: SIM115

    def one_at_a_time(environ, start_response):
        with lock:  # the whole answer is made under the lock (moto's are in memory)
            started = time.monotonic()
            status: list[str] = []

            def recording(code, headers, *rest):
                status.append(code.split(" ", 1)[0])
                return start_response(code, headers, *rest)

            answer = list(app(environ, recording if log_file else start_response))
            if log_file:
                query = environ.get("QUERY_STRING", "")
                log_file.write(
                    f"{started:.6f} {time.monotonic():.6f} {environ['REQUEST_METHOD']} "
                    f"{environ.get('PATH_INFO', '')}{'?' + query if query else ''} "
                    f"{status[0] if status else '-'}\n"
                )
            return answer

    run_simple(host, port, one_at_a_time, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
