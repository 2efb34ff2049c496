"""The Airflow UI in a real browser: Airflow runs for real (api-server, scheduler,
dag-processor, triggerer; ``tests/e2e/airflow_server.py``) on the repository's dags/ and a
fresh warehouse holding the demo's input topic, and headless Chromium (Debian's, through
Selenium: ``tests/e2e/ui_browser.py``) does what a person does: logs in through the form, opens
the Dags list and the demo DAG, unpauses it with the toggle if it is paused, triggers it from
the form with Params set there, and waits until the run shows Success. The REST API then
confirms the run and its conf, and the sink topic must hold the demo's counts.

Two runs: the first asks for one batch of at most 10 records per task (``until_caught_up``
off, ``max_batches`` 1, ``max_records`` 10), so the counts must be those of each partition's
first 10 records, which differ from the full counts: the Params reached the engine. The
second runs until caught up: the counts of every produced event.

The lakestate plugin (plugins/lakestate_assignment.py), in the same Airflow: anonymous
calls to its JSON and page are refused; signed in, its sidebar entry opens the page, whose
Rebalance button puts a generation in force, and the page shows that generation's tasks and
instances as its JSON (with a token) and the ``_assignment`` table do. Screenshots in
``$LAKESTATE_TEST_OUTPUT/airflow-plugin/``.

Scheduled runs are off (``[scheduler] use_job_schedule``): the runs are the ones triggered
here. Screenshots of every step go to ``$LAKESTATE_TEST_OUTPUT/airflow-ui/`` (default
``test-output/airflow-ui/`` in the repository); on failure also the page's HTML, and the
assertion message holds the Airflow components' log tails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow_server import AirflowServer, wait_for
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from ui_browser import Browser, executables

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "lakestate_demo"
#: How long one DAG run may take to go green (a loaded 2-core machine; normally ~1 minute).
RUN_TIMEOUT_S = 600
#: What a failed or finished run shows in the run page's state badge.
TERMINAL_STATES = ("success", "failed", "upstream_failed", "skipped")


def _output_dir(name: str = "airflow-ui") -> Path:
    base = Path(os.environ.get("LAKESTATE_TEST_OUTPUT") or REPO / "test-output")
    out = base / name
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.png"), *out.glob("*.html")]:
        old.unlink()  # this test's files from an earlier run: they would mislead
    return out


def _demo_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "lakestate_ui_demo_job", REPO / "jobs" / "demo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_topic(warehouse: Path, topic: str) -> list[dict[str, Any]]:
    """A log table's records (keys and values decoded), in partition/offset order."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(warehouse / "topics" / topic)).to_pyarrow_table().to_pylist()
    records = [
        {**row, "key": json.loads(row["key"]), "value": json.loads(row["value"])} for row in rows
    ]
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def _final_counts(warehouse: Path, topic: str) -> dict[str, int]:
    """The last count per user in the sink (a key's updates are in offset order)."""
    return {r["key"]: r["value"] for r in _read_topic(warehouse, topic)}


@dataclass
class DemoAirflow:
    """A running Airflow and the demo's warehouse, with the events produced into it."""

    server: AirflowServer
    warehouse: Path
    events: list[tuple[str, dict[str, Any], int]]
    #: Seconds each step took (printed, never asserted).
    timings: dict[str, float]


@pytest.fixture
def browser_paths() -> tuple[str, str]:
    found = executables()
    # scripts/setup.sh installs both: missing, the setup failed, and a skip would hide it.
    if isinstance(found, str):
        pytest.fail(found)
    return found


@pytest.fixture(scope="module")
def demo_airflow(airflow_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoAirflow]:
    """A running Airflow on the repository's dags/ and plugins/ whose warehouse holds the
    demo's input topic (60 sample events over 2 partitions), shared by this module's tests
    (one start); stopped, process group by group, after."""
    demo = _demo_module()
    tmp_path = tmp_path_factory.mktemp("demo_airflow")
    warehouse = tmp_path / "warehouse"
    env = airflow_env.environ(
        {
            "LAKESTATE_WAREHOUSE": str(warehouse),
            "LAKESTATE_STATE_DIR": str(tmp_path / "state"),
            # Only the runs the test triggers: no scheduled run racing them.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        }
    )
    events = list(demo.sample_events(60, users=5, seed=11))
    input_file = tmp_path / "events.jsonl"
    input_file.write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n" for k, v, ts in events),
        encoding="utf-8",
    )
    # The input topic is produced while Airflow starts (both take a while).
    produce = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lakestate.cli",
            "produce",
            demo.INPUT_TOPIC,
            str(input_file),
            "--partitions",
            "2",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # A viewer besides the admin: the plugin lets it see an app, not rebalance it.
    server = AirflowServer(home=tmp_path / "airflow_home", env=env, users={"viewer": "viewer"})
    start = time.monotonic()
    try:
        server.start()
        started = time.monotonic()
        out, _ = produce.communicate(timeout=600)
        assert produce.returncode == 0, (
            f"lakestate produce failed (exit {produce.returncode}):\n{out[-5000:]}"
        )
        timings = {"airflow start": started - start, "input produced": time.monotonic() - start}
        yield DemoAirflow(server, warehouse, events, timings)
    finally:
        if produce.poll() is None:
            produce.kill()
            produce.wait()
        server.stop()


def test_trigger_demo_dag_from_the_ui(
    demo_airflow: DemoAirflow, browser_paths: tuple[str, str], tmp_path: Path
) -> None:
    server = demo_airflow.server
    timings = demo_airflow.timings
    demo = _demo_module()
    out_dir = _output_dir()
    print(f"\nAirflow UI screenshots: {out_dir}", file=sys.stderr)

    # The DAG is known to Airflow once the dag-processor has parsed dags/ (a bounded wait).
    step = time.monotonic()
    wait_for(
        f"the dag-processor to register {DAG_ID}",
        lambda: _dag_or_none(server),
        timeout=300,
        every=2,
    )

    timings["DAG registered"] = time.monotonic() - step
    browser = Browser(*browser_paths, out_dir=out_dir, profile_dir=tmp_path / "chromium-profile")
    try:
        _login(browser, server)
        _open_dag(browser)
        _unpause(browser, server)

        step = time.monotonic()
        # Run 1: one batch of at most 10 records per task, Params set in the form.
        one_batch = {
            "until_caught_up": False,
            "max_batches": 1,
            "max_records": 10,
            "time_budget_s": 600,
        }
        run_id = _trigger(browser, one_batch, "one-batch")
        _wait_for_success(browser, server, run_id, "one-batch")
        timings["run 1 (trigger to green)"] = time.monotonic() - step
        _check_run(server, run_id, one_batch)
        records = _read_topic(demo_airflow.warehouse, demo.INPUT_TOPIC)
        first_ten = Counter(
            r["key"] for r in records if r["offset"] < 10 and r["value"]["amount"] > 0
        )
        everything = Counter(key for key, value, _ in demo_airflow.events if value["amount"] > 0)
        assert first_ten != everything, "the sample data cannot tell one batch from all of them"
        assert _final_counts(demo_airflow.warehouse, demo.OUTPUT_TOPIC) == dict(first_ten)

        # Run 2: until caught up, from the form again: every event counted.
        caught_up = {"until_caught_up": True, "time_budget_s": 600}
        _open_dag(browser)
        step = time.monotonic()
        run_id = _trigger(browser, caught_up, "until-caught-up")
        _wait_for_success(browser, server, run_id, "until-caught-up")
        timings["run 2 (trigger to green)"] = time.monotonic() - step
        _check_run(server, run_id, caught_up)
        assert _final_counts(demo_airflow.warehouse, demo.OUTPUT_TOPIC) == dict(everything)
    except Exception as exc:
        raise _failure(exc, browser, server, out_dir) from exc
    finally:
        browser.quit()
    shots = sorted(p.name for p in out_dir.glob("*.png"))
    steps = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    print(f"Airflow UI: {steps}; screenshots in {out_dir}: {shots}", file=sys.stderr)


def _failure(
    exc: Exception, browser: Browser, server: AirflowServer, out_dir: Path
) -> AssertionError:
    """What a failed browser test reports: the error, the page saved, Airflow's logs."""
    saved = browser.save_page("failure")
    return AssertionError(
        f"{type(exc).__name__}: {exc}\nbrowser: {browser.driver.current_url}; saved "
        f"{', '.join(str(p) for p in saved)} (screenshots in {out_dir})\n"
        f"--- Airflow logs ---\n{server.logs()}"
    )


def _dag_or_none(server: AirflowServer) -> dict[str, Any] | None:
    dags = server.api(f"/dags?dag_id_pattern={DAG_ID}")["dags"]
    if not any(d["dag_id"] == DAG_ID for d in dags):
        errors = server.api("/importErrors")["import_errors"]
        assert not errors, f"import errors in dags/: {errors}"
        return None
    return next(d for d in dags if d["dag_id"] == DAG_ID)


def _login(browser: Browser, server: AirflowServer) -> None:
    """Opens the UI, which sends to the login form; signs in as the configured user."""
    driver = browser.driver
    driver.get(server.url + "/")
    username = browser.element("input[name=username]")
    browser.shot("login")
    username.send_keys(server.username)
    browser.element("input[name=password]").send_keys(server.password)
    browser.wait(
        "the Sign in button to be enabled",
        lambda: browser.element("button[type=submit]").is_enabled(),
    )
    browser.click("button[type=submit]")
    browser.element("[data-testid=nav-dags-link]")  # the app's sidebar: signed in
    assert "/auth/login" not in driver.current_url, driver.current_url
    browser.shot("signed-in")


def _open_dag(browser: Browser) -> None:
    """Dags in the sidebar, then the demo DAG's link in the list."""
    browser.click("[data-testid=nav-dags-link]")
    browser.element(f"a[href='/dags/{DAG_ID}']")
    browser.shot("dags-list")
    browser.click(f"a[href='/dags/{DAG_ID}']")  # the list re-renders as runs change: retried
    browser.element("[data-testid=trigger-dag-button]")
    browser.wait(
        "the DAG page", lambda: browser.driver.current_url.rstrip("/").endswith(f"/dags/{DAG_ID}")
    )
    browser.shot("dag")


def _unpause(browser: Browser, server: AirflowServer) -> None:
    """Switches the DAG's pause toggle on if it is off (lakestate's DAGs start unpaused
    unless configured otherwise); the API must agree that the DAG is active."""
    if browser.attribute("[data-testid=toggle-pause]", "data-state") != "checked":
        browser.click("[data-testid=toggle-pause]")
        browser.wait(
            "the pause toggle to show the DAG active",
            lambda: browser.attribute("[data-testid=toggle-pause]", "data-state") == "checked",
        )
    wait_for(
        f"{DAG_ID} unpaused (REST API)",
        lambda: not server.api(f"/dags/{DAG_ID}")["is_paused"],
        timeout=60,
    )
    browser.shot("dag-unpaused")


def _set_params(browser: Browser, dialog: Any, params: dict[str, Any]) -> None:
    """Fills the trigger form's Params fields (``element_<name>``) with ``params``."""
    for name, value in params.items():

        def field(name: str = name) -> Any:
            return dialog.find_element(By.NAME, f"element_{name}")

        if isinstance(value, bool):

            def switched(name: str = name, value: bool = value) -> bool:
                if field().is_selected() != value:
                    # The checkbox is visually hidden; its switch (a label) takes the click.
                    browser.click(f"[id='switch:element_{name}']", within=dialog)
                return field().is_selected() == value

            browser.wait(f"{name} switched {'on' if value else 'off'}", switched)
        else:

            def typed(value: Any = value) -> bool:
                if field().get_attribute("value") != str(value):
                    field().send_keys(Keys.CONTROL, "a")
                    field().send_keys(Keys.BACKSPACE)
                    field().send_keys(str(value))
                return field().get_attribute("value") == str(value)

            browser.wait(f"{name} to read {value}", typed)


def _trigger(browser: Browser, params: dict[str, Any], label: str) -> str:
    """Opens the trigger form, sets ``params``, submits; the new run's id (the UI goes to
    the run's page)."""
    browser.click("[data-testid=trigger-dag-button]")
    dialog = browser.element("[data-scope=dialog][data-part=content]")
    _set_params(browser, dialog, params)
    browser.shot(f"trigger-form-{label}")
    browser.click("[data-testid=trigger-dag-submit]", within=dialog)
    browser.wait("the new run's page", lambda: "/runs/" in browser.driver.current_url)
    path = urllib.parse.urlparse(browser.driver.current_url).path
    run_id = urllib.parse.unquote(path.split("/runs/", 1)[1].split("/", 1)[0])
    browser.element("[data-testid=header-card] [data-testid=state-badge]")
    browser.shot(f"run-started-{label}")
    return run_id


def _wait_for_success(browser: Browser, server: AirflowServer, run_id: str, label: str) -> None:
    """Waits until the run page's state badge shows a final state, which must be Success, and
    its task table shows every task green too. The page polls the API while the run is
    active; it is reloaded every 30 s all the same (as a person would)."""
    last_reload = [time.monotonic()]

    def reload_now_and_then() -> None:
        if time.monotonic() - last_reload[0] > 30:
            browser.driver.refresh()
            last_reload[0] = time.monotonic()

    def run_state() -> str | None:
        reload_now_and_then()
        server.check_alive()
        state = _badge_state(browser.element("[data-testid=header-card] [data-testid=state-badge]"))
        return state if state in TERMINAL_STATES else None

    state = browser.wait(f"run {run_id} to finish", run_state, timeout=RUN_TIMEOUT_S)
    if state != "success":
        browser.shot(f"run-{state}-{label}")
        raise AssertionError(f"run {run_id} ended {state} in the UI")

    def tasks_green() -> bool:
        reload_now_and_then()
        badges = browser.driver.find_elements(
            By.CSS_SELECTOR, "[data-testid=table-cell-state] [data-testid=state-badge]"
        )
        return bool(badges) and all(_badge_state(b) == "success" for b in badges)

    browser.wait(f"run {run_id}'s task table to show success", tasks_green, timeout=120)
    browser.shot(f"run-success-{label}")


def _badge_state(badge: Any) -> str:
    """A state badge's state: its text, as the API spells states ("Upstream Failed" ->
    upstream_failed)."""
    return badge.text.strip().lower().replace(" ", "_")


def _check_run(server: AirflowServer, run_id: str, params: dict[str, Any]) -> None:
    """The REST API agrees: the run succeeded, as a manual run with the form's Params."""
    run = server.api(f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
    assert run["state"] == "success", run
    assert run["run_type"] == "manual", run
    assert {k: run["conf"].get(k) for k in params} == params, run["conf"]
    tasks = server.api(
        f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances"
    )
    from lakestate.app import load_app
    from lakestate.scaleout.instances import instances_of

    # The demo DAG: rebalance, then a run task per instance of the app.
    instances = instances_of(load_app(REPO / "jobs" / "demo.py"))
    expected = {"rebalance", *(f"run_{i.name}" for i in instances)}
    assert {t["task_id"]: t["state"] for t in tasks["task_instances"]} == dict.fromkeys(
        expected, "success"
    ), tasks


# -- the lakestate plugin (plugins/lakestate_assignment.py) ---------------------------------

PLUGIN = "/lakestate"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the redirect itself is the answer looked at


def _http(
    server: AirflowServer, path: str, method: str = "GET", token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A plain HTTP call to the api-server (no cookies; ``token`` as a bearer token):
    status, headers and body, redirects not followed."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(
        server.url + path, method=method, headers=headers, data=b"" if method == "POST" else None
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=120) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _latest_generation(warehouse: Path) -> Any:
    from lakestate.assign import history
    from lakestate.warehouse import Warehouse

    return history.latest(Warehouse(warehouse), "demo")


def test_plugin_view_shows_the_assignment(
    demo_airflow: DemoAirflow, browser_paths: tuple[str, str], tmp_path: Path
) -> None:
    """The plugin refuses anonymous calls (JSON 401, the page sends to the login form, a
    rebalance writes nothing) and a viewer's rebalance (403); a signed-in user opens it from the UI's sidebar, requests a
    rebalance with its button (the UI's session), and sees the generation the rebalance put
    in force, each task's active, warmups and standbys and the instances, as the JSON (with
    a token from /auth/token) and the _assignment table say."""
    from lakestate.app import load_app
    from lakestate.scaleout.instances import instances_of

    server = demo_airflow.server
    out_dir = _output_dir("airflow-plugin")
    before = _latest_generation(demo_airflow.warehouse)

    # Anonymous: nothing is shown and nothing is done.
    for path in (f"{PLUGIN}/api/apps", f"{PLUGIN}/api/apps/demo/assignment"):
        code, _, body = _http(server, path)
        assert code == 401, (path, code, body[:500])
    code, _, body = _http(server, f"{PLUGIN}/api/apps/demo/rebalance", method="POST")
    assert code == 401, (code, body[:500])
    code, headers, _ = _http(server, f"{PLUGIN}/?app=demo")
    assert code in (302, 303, 307) and "/auth/login" in headers.get("location", ""), (code, headers)
    code, _, _ = _http(server, f"{PLUGIN}/api/apps/demo/assignment", token="not-a-token")
    assert code in (401, 403), code
    # A viewer (a token from /auth/token) sees the app but may not rebalance it.
    viewer = server.token("viewer")
    code, _, body = _http(server, f"{PLUGIN}/api/apps/demo/assignment", token=viewer)
    assert code == 200 and json.loads(body)["app"] == "demo", (code, body[:500])
    code, _, body = _http(server, f"{PLUGIN}/api/apps/demo/rebalance", "POST", token=viewer)
    assert code == 403, (code, body[:500])
    after = _latest_generation(demo_airflow.warehouse)
    assert (after and after.number) == (before and before.number), "a refused rebalance ran"

    browser = Browser(*browser_paths, out_dir=out_dir, profile_dir=tmp_path / "chromium-profile")
    try:
        _login(browser, server)
        # The sidebar's entry opens the page inside the UI (an iframe of /lakestate/).
        browser.click(f"a[href$='/plugin/{PLUGIN.strip('/')}']")
        frame = browser.element("iframe")
        assert frame.get_attribute("src").rstrip("/").endswith(PLUGIN), frame.get_attribute("src")
        browser.driver.switch_to.frame(frame)
        browser.element("section[data-app=demo] p.generation")
        browser.shot("plugin-before-rebalance")
        # The button posts with the UI's session: a new generation reloads the page, an
        # unchanged one says so (the DAG's rebalance task may have computed it already).
        browser.driver.execute_script("window.beforeRebalance = true")
        browser.click("section[data-app=demo] button.rebalance")

        def answered() -> str | None:
            if browser.driver.execute_script("return window.beforeRebalance === undefined"):
                return "reloaded"
            text = browser.driver.find_element(By.ID, "message-demo").text
            return None if not text or text.startswith("rebalancing") else text

        outcome = browser.wait("the rebalance's answer", answered, 300)
        assert outcome == "reloaded" or outcome.startswith("no change"), outcome

        def generation_shown() -> str | None:
            shown = browser.element("section[data-app=demo] p.generation")
            return shown.get_attribute("data-generation") or None

        generation = int(browser.wait("a generation on the page", generation_shown, 300))
        rows = browser.driver.find_elements(By.CSS_SELECTOR, "section[data-app=demo] tr[data-task]")
        page_tasks = {
            r.get_attribute("data-task"): r.find_element(By.CSS_SELECTOR, "td.active").text
            for r in rows
        }
        page_cells = {
            (r.get_attribute("data-task"), c.get_attribute("data-instance")): c.text
            for r in rows
            for c in r.find_elements(By.CSS_SELECTOR, "td[data-instance]")
        }
        page_instances = [
            r.get_attribute("data-instance")
            for r in browser.driver.find_elements(
                By.CSS_SELECTOR, "section[data-app=demo] table.instances tr[data-instance]"
            )
        ]
        browser.driver.execute_script(
            "document.querySelector('section[data-app=demo]').scrollIntoView()"
        )
        browser.driver.switch_to.default_content()
        browser.shot("plugin-after-rebalance")
        # The page itself, full size, redrawing every second: its sections are swapped in
        # place; its links lead into the same Airflow (relative to the page).
        browser.driver.get(f"{server.url}{PLUGIN}/?app=demo&refresh=1")
        browser.element("section[data-app=demo] table.tasks")
        browser.driver.execute_script("window.beforeRedraw = true")
        browser.wait(
            "two redraws of the page",
            lambda: int(browser.attribute("body", "data-redrawn") or 0) >= 2,
            timeout=60,
        )
        assert browser.driver.execute_script("return window.beforeRedraw === true")  # no reload
        browser.element("section[data-app=demo] table.tasks")
        dag_link = browser.element("section[data-app=demo] h2 a")
        assert dag_link.get_property("href") == f"{server.url}/dags/{DAG_ID}", dag_link
        browser.shot("plugin-page")
    except Exception as exc:
        raise _failure(exc, browser, server, out_dir) from exc
    finally:
        browser.quit()

    # The page, the JSON (a token, as API users get one) and the table agree.
    token = server.token()
    code, _, body = _http(server, f"{PLUGIN}/api/apps/demo/assignment", token=token)
    assert code == 200, body[:500]
    view = json.loads(body)
    latest = _latest_generation(demo_airflow.warehouse)
    assert latest is not None and view["generation"] == generation == latest.number
    expected = {str(t): owner for t, owner in latest.assignment.active.items()}
    assert page_tasks == expected == {t["task"]: t["active"] for t in view["tasks"]}
    assert sorted(expected) == ["0_0", "0_1"]  # the demo's input has 2 partitions
    # Each instance's role and lag per task, as the JSON gives them (no run in between).
    shown = {(t["task"], e["instance"]): e for t in view["tasks"] for e in t["instances"]}
    assert set(page_cells) == set(shown)
    for key, entry in shown.items():
        lag = "no store" if entry["lag"] is None else f"lag {entry['lag']:,}"
        assert entry["role"] in page_cells[key] and lag in page_cells[key], (key, page_cells)
    configured = [i.name for i in instances_of(load_app(REPO / "jobs" / "demo.py"))]
    assert latest.instance_names == configured
    assert page_instances[: len(configured)] == configured
    assert set(expected.values()) <= set(configured)
    code, _, body = _http(server, f"{PLUGIN}/api/apps", token=token)
    assert code == 200 and "demo" in {a["app"] for a in json.loads(body)["apps"]}, body[:500]
    shots = sorted(p.name for p in out_dir.glob("*.png"))
    print(f"\nplugin: generation {generation}; screenshots in {out_dir}: {shots}", file=sys.stderr)
