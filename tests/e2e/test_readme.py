"""The README, tried as written by someone new, on a fresh copy of the repository.

Whatever fenced blocks README.md has when the test runs are run, none listed here, then
docs/guide.md's (the examples the README links to), in the same way and session:

- shell blocks (```bash, ```sh, ```shell; ```console lines starting with ``$ ``) in README
  order, in one bash session (``source`` and ``cd`` carry over), ``set -eo pipefail``: the
  first failing command fails the test, naming its block;
- SQL blocks (```sql, statements ending with ``;``) afterwards, each through ``lakestate
  sql``, and every ``lakestate sql "..."`` of the shell blocks: each must run and return rows;
- Python blocks: all must compile; those that need no name they do not define (the complete
  ones: an app, the test driver, plain Spark) run last, with the fresh copy's Python.

A block that cannot run inside the test suite says so in the README, on the line before it:
``<!-- readme-test: skip (the reason) -->``.

A Kafka broker is started as the integration tests start theirs
(tests/integration/kafka_broker.py), its address in ``KAFKA_BOOTSTRAP`` for the README's
Kafka section.

The fresh copy is the checkout's files that git does not ignore (a clone of the working tree,
uncommitted edits included), with no warehouse, state or Airflow home. Its ``.venv`` is a new
virtualenv that imports the copy's own ``lib/`` and reuses the installed dependencies of the
running one (so setup installs nothing), and its ``.cache`` (the Delta jars and the Kafka
Streams runner) links to the checkout's. The session's environment has no ``LAKESTATE_*``,
``AIRFLOW*`` or virtualenv variables and no virtualenv on its PATH.

Every path the README names under the repository's folders, and every ``lakestate.*`` name it
gives, must exist.

The README's first command, ``bash scripts/main.sh`` (the main job, the demo in its default
mode), is also checked as test_main_job checks that mode (``check_default_mode``), which
therefore runs only the ``--spark`` mode itself.
"""

from __future__ import annotations

import builtins
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import symtable
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_main_job import check_default_mode

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"

SHELL = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")
SKIP = re.compile(r"^skip\s*\((.+)\)$")
#: Top-level entries of the repository that README paths start with.
TOP = ("dags", "jobs", "plugins", "lib", "tests", "scripts", "docs", "docker", ".ci")
ROOT_FILES = ("pyproject.toml", "docker-compose.yml")
#: Variables of the developer's shell that must not reach the session.
DROPPED_PREFIXES = ("LAKESTATE_", "AIRFLOW", "_AIRFLOW", "PYSPARK_", "SPARK_")
DROPPED = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "JAVA_TOOL_OPTIONS")
SESSION_TIMEOUT_S = 3600
#: The main job as the README runs it: the demo in its default mode.
MAIN_JOB = re.compile(r"^bash scripts/main\.sh(?:\s+#.*)?$", re.M)
BLOCK_MARK = re.compile(r"^@@readme-block (\d+|done) [\d.]+@@$", re.M)


@dataclass(frozen=True)
class Block:
    """A fenced block of the README: its language, text, first line and skip reason."""

    lang: str
    text: str
    line: int
    skip: str | None = None
    doc: str = "README.md"

    def where(self) -> str:
        return f"{self.doc} line {self.line} ({self.lang})"


def readme_blocks(text: str, doc: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text`` in order, with the ``readme-test`` marker right before
    each (an unknown marker is an error, so a typo cannot silently skip nothing)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```\s*([\w-]*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, fence.group(1).lower()
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{doc} line {start + 1}: the block is not closed")
        i += 1
        skip = None
        before = start - 1
        while before >= 0 and (marker := MARKER.match(lines[before].strip())):
            found = SKIP.match(marker.group(1))
            if not found:
                raise AssertionError(
                    f"{doc} line {before + 1}: unknown readme-test marker "
                    f"{marker.group(1)!r} (known: skip (reason))"
                )
            skip = found.group(1)
            before -= 1
        blocks.append(Block(lang, "\n".join(body) + "\n", start + 1, skip, doc))
    return blocks


def shell_text(block: Block) -> str:
    """The commands of a shell block (a console block's ``$ `` lines, prompts removed)."""
    if block.lang != "console":
        return block.text
    return "".join(line[2:] + "\n" for line in block.text.splitlines() if line.startswith("$ "))


def sql_statements(block: Block) -> list[str]:
    """A SQL block's statements: each ends with ``;`` at the end of a line (the last may
    omit it); comment lines stay with the statement they precede."""
    statements, current = [], []
    for line in block.text.splitlines():
        current.append(line)
        if line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
            statements.append("\n".join(current).rstrip().removesuffix(";"))
            current = []
    if any(line.strip() and not line.strip().startswith("--") for line in current):
        statements.append("\n".join(current).rstrip())
    return [s.strip() for s in statements]


def shell_sql(block: Block) -> list[str]:
    """The queries of the ``lakestate sql "..."`` commands of a shell block (``--list``
    has none)."""
    queries = []
    for line in shell_text(block).splitlines():
        if re.match(r"^\s*lakestate\s+sql\s", line):
            words = shlex.split(line, comments=True)
            query = next((w for w in words[2:] if not w.startswith("-")), None)
            if query is not None:  # `lakestate sql --list` runs no query
                queries.append(query)
    return queries


def undefined_names(source: str) -> set[str]:
    """Global names a Python block reads but neither defines nor imports (builtins aside):
    a block without any is complete and can run on its own."""
    table = symtable.symtable(source, "README.md", "exec")
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    read: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        for s in t.get_symbols():
            if s.is_referenced() and (t is table or s.is_global()):
                read.add(s.get_name())
        for child in t.get_children():
            walk(child)

    walk(table)
    return {name for name in read - defined if not hasattr(builtins, name)}


# --- the fresh copy ---------------------------------------------------------------------


def fresh_copy(dest: Path) -> Path:
    """The checkout's files that git does not ignore, copied to ``dest``, with a virtualenv
    that imports ``dest/lib`` and the running virtualenv's packages."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    if (ROOT / ".cache").is_dir():
        (dest / ".cache").symlink_to(ROOT / ".cache")
    make_venv(dest)
    return dest


def make_venv(repo: Path) -> None:
    """``repo/.venv``: lakestate editable from ``repo/lib``, every dependency from the running
    virtualenv, its scripts pointing at the new interpreter, and setup's stamp, so
    ``scripts/setup.sh`` finds the project installed (as after a first setup)."""
    shared = Path(sys.prefix)
    venv = repo / ".venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    shared_site = shared / "lib" / version / "site-packages"
    (site / "__editable__.lakestate-0.1.0.pth").write_text(f"{repo / 'lib'}\n")
    # A .pth line adds a directory but does not run the .pth files in it: the shared
    # virtualenv's own editable path (its checkout's lib/) is not imported.
    (site / "zz-shared-venv.pth").write_text(f"{shared_site}\n")
    python = venv / "bin" / "python"
    for script in sorted((shared / "bin").iterdir()):
        target = venv / "bin" / script.name
        if target.exists() or script.is_dir():
            continue
        data = script.read_bytes()
        first, _, rest = data.partition(b"\n")
        if first.startswith(b"#!") and b"python" in first and str(shared).encode() in first:
            target.write_bytes(b"#!" + str(python).encode() + b"\n" + rest)
            target.chmod(0o755)
        else:
            shutil.copy2(script, target)
    stamp = hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()
    (venv / ".lakestate-installed").write_text(stamp + "\n")


def session_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(DROPPED_PREFIXES) and k not in DROPPED
    }
    venv_bins = {str(Path(sys.prefix) / "bin"), str(ROOT / ".venv" / "bin")}
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p not in venv_bins]
    env["PATH"] = os.pathsep.join(path)
    return env


def tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --- the tests --------------------------------------------------------------------------


def test_readme_blocks_parse_and_python_blocks_compile():
    blocks = readme_blocks(README.read_text())
    blocks += readme_blocks(GUIDE.read_text(), "docs/guide.md")
    assert any(b.lang in SHELL for b in blocks), "the README has no shell block"
    for block in blocks:
        if block.lang == "python":
            compile(block.text, block.where(), "exec")


def test_the_session_keeps_state_and_names_the_failing_block(tmp_path):
    """The harness itself: blocks share one shell (cd, variables), and the first failing
    command fails the run, naming its block's README line."""
    text = (
        "```bash\nmkdir sub && cd sub\nGREETING=hi\n```\n\n"
        "<!-- readme-test: skip (would fail) -->\n```bash\nexit 7\n```\n\n"
        '```sh\necho "$GREETING from $(basename "$PWD")"\n```\n\n'
        "```console\n$ false | cat\noutput\n$ echo never\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.line, b.lang, b.skip) for b in blocks] == [
        (1, "bash", None),
        (7, "bash", "would fail"),
        (11, "sh", None),
        (15, "console", None),
    ]
    with pytest.raises(AssertionError, match=r"README.md line 15 \(console\) failed \(exit 1\)"):
        run_shell_blocks(tmp_path, blocks, session_env(), tmp_path)
    log = (tmp_path / "readme.log").read_text()
    assert "hi from sub" in log
    assert "never" not in log
    with pytest.raises(AssertionError, match="unknown readme-test marker"):
        readme_blocks("<!-- readme-test: skipp (typo) -->\n```bash\ntrue\n```\n")


def test_paths_and_names_the_readme_gives_exist(tmp_path):
    text = README.read_text()
    created = set()  # files the README's own commands write (`> path`)
    for block in readme_blocks(text):
        if block.lang in SHELL:
            created.update(re.findall(r">\s*([\w./-]+)", shell_text(block)))
    missing = []
    top = "|".join(re.escape(t) for t in TOP)
    for found in re.finditer(rf"(?<![\w./<>$-])((?:{top})/[\w./*-]*)", text):
        path = found.group(1).rstrip(".,;:")
        if path not in created and not glob.glob(str(ROOT / path)):
            missing.append(path)
    missing += [f for f in ROOT_FILES if f in text and not (ROOT / f).exists()]
    assert not missing, f"the README names paths that do not exist: {sorted(set(missing))}"

    lib_text = "\n".join(p.read_text() for p in (ROOT / "lib").rglob("*.py"))
    # A config key lakestate reads is a name too; the rest must import.
    names = sorted(
        name
        for name in set(re.findall(r"`(lakestate(?:\.\w+)+)", text))
        if f'"{name}"' not in lib_text
    )
    # In a fresh interpreter with its own AIRFLOW_HOME: lakestate.airflow imports Airflow,
    # which reads (and writes) its configuration when imported.
    env = dict(session_env(), AIRFLOW_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "lib"))
    proc = subprocess.run(
        [sys.executable, "-c", RESOLVE, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    unknown = proc.stdout.split()
    assert not unknown, f"the README names what lakestate does not have: {unknown}"


#: Prints each dotted name given that is neither a module nor an attribute of one.
RESOLVE = """
import importlib, sys

def resolves(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False

print(" ".join(name for name in sys.argv[1:] if not resolves(name)))
"""


def run_shell_blocks(repo: Path, blocks: list[Block], env: dict[str, str], logs: Path) -> list[str]:
    """Runs the shell blocks in order in one bash session in ``repo``; fails naming the
    block whose command failed. Returns each block's duration, for the report."""
    shell_blocks = [b for b in blocks if b.lang in SHELL and not b.skip]
    script = ["set -eo pipefail"]
    for n, block in enumerate(shell_blocks):
        script.append(f'echo "@@readme-block {n} $EPOCHREALTIME@@"')
        script.append(shell_text(block))
    script.append('echo "@@readme-block done $EPOCHREALTIME@@"')
    (logs / "readme.sh").write_text("\n".join(script) + "\n")
    with open(logs / "readme.log", "w") as log:
        proc = subprocess.run(
            ["bash", str(logs / "readme.sh")],
            cwd=repo,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=SESSION_TIMEOUT_S,
        )
    output = (logs / "readme.log").read_text(errors="replace")
    parts = re.split(r"^@@readme-block (\d+|done) ([\d.]+)@@$", output, flags=re.M)
    started = [(parts[i], float(parts[i + 1]), parts[i + 2]) for i in range(1, len(parts), 3)]
    report = []
    for (label, at, _), nxt in zip(started, started[1:], strict=False):
        block = shell_blocks[int(label)]
        report.append(f"{block.where()}: {nxt[1] - at:.0f} s")
    if proc.returncode != 0:
        label, _, text = started[-1]
        where = shell_blocks[int(label)].where() if label != "done" else "after the blocks"
        raise AssertionError(
            f"{where} failed (exit {proc.returncode}); its output ends:\n{tail(text)}\n"
            f"(the whole session: {logs / 'readme.log'})"
        )
    return report


def block_output(log: str, index: int) -> str:
    """What the ``index``-th shell block that ran printed (its part of the session's log)."""
    return BLOCK_MARK.split(log)[2 * index + 2]


def check_main_job(blocks: list[Block], logs: Path) -> None:
    """The output of the README's ``bash scripts/main.sh`` is the demo's default mode's on a
    new warehouse (test_main_job.check_default_mode)."""
    ran = [b for b in blocks if b.lang in SHELL and not b.skip]
    main_job = [n for n, b in enumerate(ran) if MAIN_JOB.search(shell_text(b))]
    assert main_job, "the README runs no `bash scripts/main.sh`: the default mode is unchecked"
    log = (logs / "readme.log").read_text(errors="replace")
    check_default_mode(block_output(log, main_job[0]))


def check_sql(repo: Path, blocks: list[Block], env: dict[str, str]) -> list[str]:
    """Every statement of the SQL blocks runs as written through ``lakestate sql``, and it
    and every query of a shell block's ``lakestate sql`` return rows. One ``lakestate --json
    sql`` per query does both (its rows are JSON lines, counted): a process start (2-4 s
    under the suite's load) instead of two, the second wrapping the query in a count."""
    lakestate = str(repo / ".venv" / "bin" / "lakestate")

    failures, report = [], []
    for block in blocks:
        if block.skip or block.lang not in SHELL | {"sql"}:
            continue
        queries = sql_statements(block) if block.lang == "sql" else shell_sql(block)
        for query in queries:
            ran = subprocess.run(
                [lakestate, "--json", "sql", query],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            if ran.returncode != 0:
                failures.append(f"{block.where()}: {query}\n{tail(ran.stderr, 20)}")
                continue
            rows = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
            if not rows:
                failures.append(f"{block.where()}: no rows from {query}\n{tail(ran.stderr, 20)}")
            else:
                report.append(f"{block.where()}: {len(rows)} row(s) from {query[:60]!r}")
    assert not failures, "README SQL that fails or returns nothing:\n" + "\n\n".join(failures)
    return report


def run_python_blocks(repo: Path, blocks: list[Block], env: dict[str, str]) -> list[str]:
    """Runs the complete Python blocks (no name used but not defined) with ``repo``'s
    interpreter, in ``repo``."""
    python = str(repo / ".venv" / "bin" / "python")
    report = []
    for block in blocks:
        if block.lang != "python" or block.skip or undefined_names(block.text):
            continue
        ran = subprocess.run(
            [python, "-"], input=block.text, cwd=repo, env=env, capture_output=True, text=True
        )
        assert ran.returncode == 0, f"{block.where()} failed:\n{tail(ran.stderr, 40)}"
        report.append(f"{block.where()}: ran")
    return report


def start_kafka(directory: Path) -> Any:
    """The tests' Kafka broker (tests/integration/kafka_broker.py), started the same way;
    fails the test (never skips) when its jars are not cached."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    try:
        from kafka_broker import BrokerJarsMissing, start_broker
    finally:
        sys.path.pop(0)
    try:
        return start_broker(directory)
    except BrokerJarsMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.e2e
def test_readme_runs_as_written(tmp_path):
    # Then the guide's examples, which the README links to (its dedup, join and Processor API
    # examples among them), in the same session.
    blocks = readme_blocks(README.read_text()) + readme_blocks(GUIDE.read_text(), "docs/guide.md")
    repo = fresh_copy(tmp_path / "lakestate")
    broker = start_kafka(tmp_path / "kafka")  # the README's Kafka section: $KAFKA_BOOTSTRAP
    env = dict(session_env(), KAFKA_BOOTSTRAP=broker.bootstrap_servers)
    try:
        report = run_shell_blocks(repo, blocks, env, tmp_path)
        check_main_job(blocks, tmp_path)
        report += check_sql(repo, blocks, env)
        report += run_python_blocks(repo, blocks, env)
    finally:
        broker.stop()
    print("\n".join(report))
