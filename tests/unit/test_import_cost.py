"""Start-up cost: every CLI command, Airflow task and scheduled run starts a fresh Python
process, so importing lakestate must not pull in the heavy libraries only some paths use.
Each case imports in a fresh interpreter and lists what it loaded.

Kept out of start-up (docs/benchmarks.md, "Start-up imports"):

- ``pandas`` and ``pyarrow.dataset``: pyarrow.dataset imports pandas (~0.3 s idle, over a
  second at load); lakestate uses neither itself, only deltalake's table reads do, when a
  command reads a table. Filters are built with ``pyarrow.compute.field``.
- ``pyspark`` and ``py4j``: the Spark transport and ``sql --engine spark`` only.
- ``duckdb``: ``lakestate sql`` only.
- ``confluent_kafka``: Kafka topics only.
- ``airflow``: the DAG factory and operator only (seconds to import).
- ``hypothesis``: tests only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Packages (with any of their modules) and single modules kept out.
HEAVY_PACKAGES = {"pandas", "pyspark", "py4j", "duckdb", "confluent_kafka", "airflow", "hypothesis"}
HEAVY_MODULES = {"pyarrow.dataset"}

CASES = {
    "import lakestate": "import lakestate",
    "from lakestate import run_app": "from lakestate import run_app",
    "lakestate --help": (
        "import contextlib, io\n"
        "from lakestate.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    ),
    "testing driver": "from lakestate.testing import TopologyTestDriver",
}


def _loaded(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_start_up_leaves_heavy_libraries_out(case: str) -> None:
    loaded = _loaded(CASES[case])
    assert "lakestate" in loaded
    pulled = sorted(m for m in loaded if m in HEAVY_MODULES or m.split(".")[0] in HEAVY_PACKAGES)
    assert pulled == [], f"{case} imports {pulled}"


def test_the_probe_sees_a_heavy_import() -> None:
    # The check above could pass vacuously if the probe missed imports: reading a Delta
    # table through deltalake does pull in pyarrow.dataset (and with it pandas).
    loaded = _loaded("import lakestate, pyarrow.dataset")
    assert {"pyarrow.dataset", "pandas"} <= loaded
