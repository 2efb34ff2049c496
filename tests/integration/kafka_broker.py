"""A real Kafka broker for the tests: one single-node KRaft process (broker and controller)
from Apache Kafka's own jars, on free 127.0.0.1 ports, its data in a directory of the test
session, run with the machine's Java.

The jars come from Maven Central once, through ``scripts/setup.sh``
(``scripts/fetch_kafka.sh``, pom ``kafka_broker.pom.xml``); this module never downloads:
without them ``broker_classpath`` raises ``BrokerJarsMissing`` saying what to run, and the
tests that need a broker fail with it (they do not skip).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = REPO / "scripts" / "fetch_kafka.sh"

# The broker's work in the tests is small: a small heap, the quick JIT compiler only (it
# starts in half the CPU time) and one GC thread, on a machine whose cores are shared.
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class BrokerJarsMissing(RuntimeError):
    """Kafka's jars are not in the project's cache: scripts/setup.sh resolves them."""


class BrokerDidNotStart(RuntimeError):
    """The broker exited or did not accept connections in time; the message has its log."""


@dataclass
class KafkaBroker:
    """A running broker: ``bootstrap_servers`` for the clients, ``stop()`` to end it."""

    bootstrap_servers: str
    directory: Path
    process: subprocess.Popen
    start_seconds: float  # from the storage format's start to the first metadata answer

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    def stop(self, timeout: float = 30.0) -> None:
        """A controlled shutdown (SIGTERM); SIGKILL if it takes longer than ``timeout``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def broker_classpath() -> str:
    """The broker's classpath from the project's cache; ``BrokerJarsMissing`` if not there."""
    done = subprocess.run(
        ["bash", str(FETCH_SCRIPT), "--cached"], capture_output=True, text=True, cwd=REPO
    )
    if done.returncode != 0:
        raise BrokerJarsMissing(done.stderr.strip() or f"{FETCH_SCRIPT} --cached failed")
    directory = Path(done.stdout.strip().splitlines()[-1])
    return (directory / "classpath.txt").read_text().strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded, never "-" first.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _server_properties(directory: Path, port: int, controller_port: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(directory / "data"),
        # One broker: every internal topic has one replica; few partitions start faster.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # As on most production clusters: a topic exists only when someone created it, so a
        # misnamed topic is an error, not a new empty topic.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        # Keep every record: the tests' records are stamped near 1970, which the default
        # retention (7 days by timestamp) would delete at the broker's first check.
        "log.retention.ms": "-1",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _log4j_properties(log_path: Path) -> str:
    return (
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {log_path}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
    )


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"(no {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_broker(directory: Path, timeout: float = 90.0) -> KafkaBroker:
    """Formats a KRaft log directory under ``directory`` and starts the broker on it; returns
    once it answers a metadata request. ``BrokerJarsMissing`` without the jars,
    ``BrokerDidNotStart`` (with its log's end) if it exits or is not ready in ``timeout``."""
    classpath = broker_classpath()
    directory.mkdir(parents=True, exist_ok=True)
    port, controller_port = _free_port(), _free_port()
    properties = directory / "server.properties"
    properties.write_text(_server_properties(directory, port, controller_port))
    log_path = directory / "broker.log"
    (directory / "log4j2.properties").write_text(_log4j_properties(log_path))
    java = _java(directory, classpath)
    started = time.monotonic()
    fmt = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(properties)],
        capture_output=True,
        text=True,
    )
    if fmt.returncode != 0:
        raise BrokerDidNotStart(
            f"kafka.tools.StorageTool format failed ({fmt.returncode}):\n{fmt.stdout}{fmt.stderr}"
        )
    process = _launch(directory, java)
    broker = KafkaBroker(f"127.0.0.1:{port}", directory, process, 0.0)
    try:
        _wait_ready(broker, started + timeout)
    except BaseException:
        broker.stop(timeout=5)
        raise
    broker.start_seconds = time.monotonic() - started
    return broker


def restart_broker(broker: KafkaBroker, down_seconds: float = 0.0, timeout: float = 90.0) -> None:
    """Stop ``broker`` (a controlled shutdown), wait ``down_seconds``, and start it again on
    the same ports and data; returns once it answers a metadata request."""
    broker.stop()
    time.sleep(down_seconds)
    started = time.monotonic()
    broker.process = _launch(broker.directory, _java(broker.directory, broker_classpath()))
    _wait_ready(broker, started + timeout)


def _java(directory: Path, classpath: str) -> list[str]:
    return [
        "java",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
        f"-Djava.io.tmpdir={directory}",
        "-cp",
        classpath,
    ]


def _launch(directory: Path, java: list[str]) -> subprocess.Popen:
    with open(directory / "broker.out", "ab") as out:
        return subprocess.Popen(
            [*java, "kafka.Kafka", str(directory / "server.properties")],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def _die_with_parent() -> None:
    """In the broker's process before Java starts: SIGKILL it when the process that started
    it dies, so that a test session that crashes (or is killed) leaves no broker behind."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _listens(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _wait_ready(broker: KafkaBroker, deadline: float) -> None:
    from confluent_kafka.admin import AdminClient

    host, port = broker.bootstrap_servers.split(":")
    admin = None
    while True:
        code = broker.process.poll()
        if code is not None:
            raise BrokerDidNotStart(
                f"the Kafka broker exited ({code}) while starting; its log "
                f"({broker.log_path}) ends:\n{_tail(broker.log_path)}\n"
                f"its output: {_tail(broker.directory / 'broker.out')}"
            )
        # The client only once the port listens: librdkafka logs every refused connection.
        if admin is None and _listens(host, int(port)):
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        try:
            if admin is not None and admin.list_topics(timeout=1).brokers:
                return
        except Exception:  # KafkaException while it is not ready yet
            pass
        if time.monotonic() > deadline:
            raise BrokerDidNotStart(
                f"the Kafka broker did not answer on {broker.bootstrap_servers} in time; "
                f"its log ({broker.log_path}) ends:\n{_tail(broker.log_path)}"
            )
        time.sleep(0.2)
