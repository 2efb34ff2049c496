"""A real Airflow for the browser test: ``airflow db migrate``, then the api-server (UI and
REST API on a free local port), scheduler, dag-processor and triggerer as subprocesses, each
in its own process group with its own log file, stopped group by group.

Login is the simple auth manager's form with a known user: ``[core] simple_auth_manager_users``
names it and the passwords file (``simple_auth_manager_passwords_file``), written before any
component starts, holds its password (the manager only generates passwords for users missing
from that file).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: The components started after the database is migrated (the triggerer too: a task may defer).
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

T = TypeVar("T")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(what: str, check: Callable[[], T | None], timeout: float, every: float = 1.0) -> T:
    """Calls ``check`` until it returns something truthy (returned) or ``timeout`` seconds
    pass (AssertionError naming ``what`` and the last exception ``check`` raised)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # the condition's own failures are retried until the deadline
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last error: {last!r}"
            )
        time.sleep(every)


@dataclass
class AirflowServer:
    """An Airflow whose home, SQLite database and logs are in ``home``; its components get
    ``env`` (the DAGs folder, ...) plus what ``environ`` sets."""

    home: Path
    env: dict[str, str]
    username: str = "admin"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    #: More users of the simple auth manager: name -> role (viewer, user, op, admin); their
    #: passwords are in ``passwords``.
    users: dict[str, str] = field(default_factory=dict)
    passwords: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.home / "component-logs"

    def environ(self) -> dict[str, str]:
        """The components' environment: ``env`` plus the login, the port and the URLs."""
        env = dict(self.env)
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                    [f"{self.username}:admin", *(f"{n}:{r}" for n, r in self.users.items())]
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                # Workers reach the task execution API on this server, not on the default :8080.
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                # One secret for every component, so the scheduler's task tokens verify.
                "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
                "AIRFLOW__API_AUTH__JWT_ISSUER": "lakestate-e2e",
            }
        )
        return env

    @property
    def passwords_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json"

    @property
    def jwt_secret(self) -> str:
        secret_file = self.home / ".jwt_secret"
        if not secret_file.is_file():
            secret_file.write_text(secrets.token_urlsafe(32), encoding="utf-8")
        return secret_file.read_text(encoding="utf-8")

    def start(self, timeout: float = 600) -> None:
        """Migrates the database, starts the components and waits until the api-server
        answers and reports the scheduler and the dag-processor healthy."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name in self.users:
            self.passwords.setdefault(name, secrets.token_urlsafe(12))
        self.passwords_file.write_text(
            json.dumps({self.username: self.password, **self.passwords}), encoding="utf-8"
        )
        env = self.environ()
        migrate_log = self.log_dir / "db-migrate.log"
        with migrate_log.open("wb") as out:
            rc = subprocess.run(
                [sys.executable, "-m", "airflow", "db", "migrate"],
                env=env,
                cwd=self.home,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        if rc != 0:
            raise AssertionError(f"airflow db migrate failed (exit {rc}):\n{tail(migrate_log)}")
        for name in COMPONENTS:
            args = [name]
            if name == "api-server":
                args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
            with (self.log_dir / f"{name}.log").open("wb") as out:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *args],
                    env=env,
                    cwd=self.home,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop() ends its workers too
                )
        try:
            wait_for(
                "the api-server to report a healthy scheduler and dag-processor",
                self._healthy,
                timeout,
            )
            # The api-server builds its task execution API on the first request to it (7 s on an
            # idle machine, 43 s measured under the suite's load) and answers nothing meanwhile;
            # a task whose first call waits that long fails on its client's 5 s timeout. Users'
            # servers pay this once too; here it is paid before the tests trigger runs.
            wait_for("the api-server's task execution API", self._execution_api_up, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def _execution_api_up(self) -> bool:
        self.check_alive()
        with urllib.request.urlopen(f"{self.url}/execution/health", timeout=600) as resp:
            return json.load(resp).get("status") == "healthy"

    def _healthy(self) -> bool:
        self.check_alive()
        with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=10) as resp:
            health = json.load(resp)
        return all(
            health.get(part, {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "dag_processor")
        )

    def check_alive(self) -> None:
        """Raises AssertionError (with the component's log tail) if a component has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(
                    f"airflow {name} exited (code {proc.returncode}):\n"
                    f"{tail(self.log_dir / f'{name}.log')}"
                )

    def token(self, username: str | None = None) -> str:
        """A REST API token for the user (the simple auth manager's ``/auth/token``), or for
        another of ``users``."""
        password = self.password if username is None else self.passwords[username]
        body = json.dumps({"username": username or self.username, "password": password}).encode()
        req = urllib.request.Request(
            f"{self.url}/auth/token",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)["access_token"]

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """A call to the REST API (``/api/v2`` + ``path``); its JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}/api/v2{path}",
            data=data,
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"{method} /api/v2{path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc

    def logs(self, lines: int = 40) -> str:
        """The tails of every component's log and of the logs under AIRFLOW_HOME/logs (tasks,
        DAG file processing, lakestate runs), for failure messages."""
        logs = sorted((self.home / "logs").rglob("*.log")) if (self.home / "logs").is_dir() else []
        # Task logs and the scheduler's first: a CI report shows a failure's head only.
        first = [p for p in logs if "dag_processor" not in p.parts]
        first += [self.log_dir / "scheduler.log"]
        rest = [p for p in sorted(self.log_dir.glob("*.log")) if p not in first]
        rest += [p for p in logs if p not in first]
        return "\n".join(
            f"=== {path} (last {lines} lines)\n{tail(path, lines)}"
            for path in first + rest
            if path.is_file()
        )

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to each component's process group, SIGKILL to what is left after ``grace``."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGKILL)  # also workers whose leader already exited
            proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group's id is the leader's pid
    except ProcessLookupError:
        pass
