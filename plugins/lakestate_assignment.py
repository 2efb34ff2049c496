"""The lakestate Airflow plugin: each app's task assignment in the Airflow UI and as JSON.

A FastAPI app mounted by the api-server at ``/lakestate`` (``fastapi_apps``) and an entry
"lakestate" in the UI's navigation (``external_views``, shown inside the UI at
``/plugin/lakestate``):

``GET /lakestate/``
    The page: per app its current generation (when, why, for which instances), its
    instances (queue, capacity, tasks per role, last report), per task its active, warmup
    and standby instances, each instance's lag on it and a warmup's progress, the task's
    last committed batch, and the generations' history; a button per app requests a
    rebalance. ``?app=NAME`` shows one app.
``GET /lakestate/api/apps``
    The apps (JSON): name, DAG id, job file, latest generation.
``GET /lakestate/api/apps/{app}/assignment``
    One app's assignment (JSON: ``lakestate.read.assignment_view.assignment_view``).
``POST /lakestate/api/apps/{app}/rebalance``
    Computes the next generation now (``lakestate rebalance APP --force``); its result.

Every endpoint needs Airflow's authentication, as the REST API does (a JWT as
``Authorization: Bearer`` from ``POST /auth/token``, or the UI's session cookie): an
anonymous call gets 401 (the page: a redirect to the login form). Access is Airflow's DAG
access to the app's DAG, ``lakestate_<app>``: reading it to see the app, running it (as
triggering it) to request a rebalance; the auth manager decides (simple, FAB, ...).

The apps are those of the DAG factory: the jobs in ``<dags folder>/../jobs/*.py``, and
every app folder of a local warehouse (env ``LAKESTATE_WAREHOUSE``, else ``<dags
folder>/../warehouse``, as the DAGs find it). Everything is read through delta-rs
(``lakestate.read.assignment_view``): no JVM is started per page.
"""

from __future__ import annotations

import html
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

#: Where the api-server mounts the plugin's app.
URL_PREFIX = "/lakestate"
#: The UI's route of the embedded page (``/plugin/<route>``).
UI_ROUTE = "lakestate"
#: How often the page redraws its apps by default (seconds): runs and rebalances move
#: tasks and lags while it is open.
REFRESH_S = 30

_bearer = HTTPBearer(auto_error=False)
_Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


# -- where the apps are ---------------------------------------------------------------------


def _base_dir() -> Path:
    """The checkout the DAGs come from: the DAGs folder's parent (``<repo>/dags``)."""
    from airflow.configuration import conf

    return Path(conf.get("core", "dags_folder")).resolve().parent


def _warehouse() -> Any:
    from lakestate.warehouse import Warehouse

    return Warehouse(os.environ.get("LAKESTATE_WAREHOUSE") or _base_dir() / "warehouse")


@dataclass(frozen=True)
class _Job:
    """An app's job file and what loading it gave: the app, or why it failed."""

    path: Path
    app: Any = None
    error: str | None = None


_loaded: dict[Path, tuple[int, _Job]] = {}
_lock = threading.Lock()


def _jobs() -> dict[str, _Job]:
    """The apps of ``<base>/jobs/*.py`` by name (a job that fails to load: by file stem,
    with its error); each file is loaded again only when it changed."""
    from lakestate.app import load_app

    found: dict[str, _Job] = {}
    jobs_dir = _base_dir() / "jobs"
    for path in sorted(jobs_dir.glob("*.py")) if jobs_dir.is_dir() else []:
        mtime = path.stat().st_mtime_ns
        with _lock:
            held = _loaded.get(path)
            if held is None or held[0] != mtime:
                try:
                    job = _Job(path, app=load_app(path))
                except Exception as exc:  # shown on the page, beside the other apps
                    job = _Job(path, error=f"{type(exc).__name__}: {exc}")
                _loaded[path] = (mtime, job)
                held = _loaded[path]
        job = held[1]
        found[job.app.name if job.app is not None else path.stem] = job
    return found


def _apps() -> dict[str, _Job | None]:
    """Every app: the jobs', and the warehouse's app folders (None: no job file here)."""
    apps: dict[str, _Job | None] = dict(_jobs())
    warehouse = _warehouse()
    if warehouse.is_local:  # a remote warehouse's folders are not listed: its jobs' apps only
        for name in warehouse.list_apps():
            apps.setdefault(name, None)
    return dict(sorted(apps.items()))


def dag_id_of(app: str) -> str:
    """The DAG the factory makes for ``app`` (``make_dag``'s default id)."""
    return f"lakestate_{app}"


# -- authentication and access --------------------------------------------------------------


async def _user_or_none(request: Request, credentials: _Credentials) -> Any:
    """The signed-in user (a bearer token, else the UI's cookie), or None."""
    from airflow.api_fastapi.core_api.security import get_user

    try:
        return await get_user(request, None, credentials)
    except HTTPException:
        return None


async def _user(request: Request, credentials: _Credentials) -> Any:
    """The signed-in user; 401/403 as Airflow's REST API answers otherwise."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, credentials)


_User = Annotated[Any, Depends(_user)]
_UserOrNone = Annotated[Any, Depends(_user_or_none)]


def _may(user: Any, app: str, method: str) -> bool:
    """Whether ``user`` may read (GET) or run (POST) the app's DAG."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    return get_auth_manager().is_authorized_dag(
        method=method,  # type: ignore[arg-type]
        access_entity=DagAccessEntity.RUN if method == "POST" else None,
        details=DagDetails(id=dag_id_of(app)),
        user=user,
    )


def _known_app(app: str, user: Any, method: str) -> _Job | None:
    """The app's job (None: warehouse only); 404 for an unknown app, 403 without access."""
    apps = _apps()
    if app not in apps:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no lakestate app {app!r}: not in {_base_dir() / 'jobs'} nor in the warehouse "
            f"{_warehouse().root}; apps: {', '.join(apps) or 'none'}",
        )
    if not _may(user, app, method):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"no access to DAG {dag_id_of(app)}")
    return apps[app]


# -- what is shown --------------------------------------------------------------------------


def _view(app: str, job: _Job | None) -> dict[str, Any]:
    """The app's assignment (``assignment_view``), with its DAG and job file."""
    from lakestate.read.assignment_view import DEFAULT_ACCEPTABLE_RECOVERY_LAG, assignment_view

    loaded = job.app if job is not None else None
    acceptable = DEFAULT_ACCEPTABLE_RECOVERY_LAG
    cluster, kafka_topics = None, frozenset()
    if loaded is not None:
        from lakestate.assign import AssignorConfig
        from lakestate.read.describe import app_cluster

        acceptable = AssignorConfig.from_config(loaded.config).acceptable_recovery_lag
        # Its Kafka inputs' lags are its consumer group's, as `lakestate status` shows them.
        cluster, kafka_topics = app_cluster(loaded)
    view = assignment_view(
        _warehouse(),
        app,
        topology=loaded.topology if loaded is not None else None,
        acceptable_recovery_lag=acceptable,
        cluster=cluster,
        kafka_topics=kafka_topics,
    )
    return {
        **view,
        "dag_id": dag_id_of(app),
        "job": str(job.path) if job is not None else None,
        "job_error": job.error if job is not None else None,
    }


def _summary(app: str, job: _Job | None) -> dict[str, Any]:
    from lakestate.read.assignment_view import app_summary

    return {
        **app_summary(_warehouse(), app),
        "dag_id": dag_id_of(app),
        "job": str(job.path) if job is not None else None,
        "job_error": job.error if job is not None else None,
    }


# -- the app --------------------------------------------------------------------------------

# No docs or OpenAPI routes: every route of the app needs a signed-in user.
api = FastAPI(
    title="lakestate",
    description="lakestate apps' task assignment (instances, warmups, generations).",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)


@api.get("/api/apps")
def list_apps(user: _User) -> dict[str, Any]:
    """The apps the user may read, each with its latest generation."""
    return {
        "apps": [_summary(name, job) for name, job in _apps().items() if _may(user, name, "GET")],
        "warehouse": _warehouse().root,
    }


@api.get("/api/apps/{app}/assignment")
def get_assignment(app: str, user: _User) -> JSONResponse:
    """One app's assignment: generation, history, tasks, instances, lags. 409 with the
    reason when it cannot be read now (e.g. the app is mid-rewind)."""
    from lakestate.errors import StreamsException

    job = _known_app(app, user, "GET")
    try:
        return JSONResponse(_view(app, job))
    except StreamsException as exc:
        return JSONResponse(
            {"app": app, "error": f"{type(exc).__name__}: {exc}"},
            status_code=status.HTTP_409_CONFLICT,
        )


@api.post("/api/apps/{app}/rebalance")
def post_rebalance(app: str, user: _User) -> JSONResponse:
    """Computes the app's next generation now (``lakestate rebalance APP --force``; written
    only when it differs from the latest): the result, as ``rebalance --json`` prints it.
    409 when the app cannot be rebalanced (no job file, a bad config, a concurrent
    rebalance), with the reason."""
    from lakestate.errors import StreamsException

    job = _known_app(app, user, "POST")
    if job is None or job.app is None:
        why = job.error if job is not None else f"no job file for it in {_base_dir() / 'jobs'}"
        return JSONResponse(
            {"app": app, "error": f"app {app!r} cannot be rebalanced here: {why}"},
            status_code=status.HTTP_409_CONFLICT,
        )
    try:
        from lakestate import rebalance

        result = rebalance(job.app, _warehouse(), force=True, say=lambda _: None)
    except StreamsException as exc:  # bad config, a concurrent rebalance: the user's to fix
        return JSONResponse(
            {"app": app, "error": f"{type(exc).__name__}: {exc}"},
            status_code=status.HTTP_409_CONFLICT,
        )
    return JSONResponse({"app": app, "rebalance": result.to_json()})


@api.get("/", response_class=HTMLResponse)
def page(
    request: Request, user: _UserOrNone, app: str | None = None, refresh: str | None = None
) -> Response:
    """The page (``?app=NAME``: that app only; ``?refresh=S``: redraw every S seconds, 0:
    never, default ``REFRESH_S``); anonymous: to the login form."""
    if user is None:
        from airflow.api_fastapi.app import get_auth_manager

        login = get_auth_manager().get_url_login(next_url=str(request.url))
        return RedirectResponse(login, status_code=status.HTTP_303_SEE_OTHER)
    apps = _apps()
    if app is not None:
        _known_app(app, user, "GET")
        apps = {app: apps[app]}
    shown = {name: job for name, job in apps.items() if _may(user, name, "GET")}
    views = []
    for name, job in shown.items():
        try:
            views.append(_view(name, job))
        except Exception as exc:  # one broken app does not hide the others
            views.append({"app": name, "dag_id": dag_id_of(name), "error": f"{exc}"})
    return HTMLResponse(render_page(views, refresh_s=_refresh_s(refresh)))


# -- the page -------------------------------------------------------------------------------


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _e(value: Any) -> str:
    return html.escape("-" if value is None or value == [] else str(value))


def _names(values: list[str]) -> str:
    return ", ".join(html.escape(v) for v in values) or "-"


def _instance_cell(entry: dict[str, Any] | None, acceptable: int) -> str:
    """One instance's cell of a task row: role, lag, and a warmup's progress."""
    if entry is None:
        return '<td class="none">-</td>'
    role, lag = entry["role"], entry["lag"]
    lag_text = "no store" if lag is None else f"lag {lag:,}"
    parts = [f'<span class="role {role}">{html.escape(role)}</span> {lag_text}']
    if entry["held_pct"] is not None:
        pct = entry["held_pct"]
        parts.append(
            f'<progress max="100" value="{pct}" title="{pct}% of the committed offsets held">'
            f"</progress> {pct}%"
        )
    if role == "warmup":
        then = entry.get("lag_at_assignment")
        parts.append(
            f"warmup since generation {_e(entry.get('warmup_since'))}"
            + ("" if then is None else f", lag then {then:,}")
        )
    if entry["caught_up"] is not None:
        parts.append("caught up" if entry["caught_up"] else f"behind (acceptable: {acceptable:,})")
    if entry["reported_at_ms"] is None:
        parts.append("no report yet")
    else:
        held = "" if entry["local_batch"] is None else f"store at batch {entry['local_batch']}, "
        parts.append(f"{held}reported {_time(entry['reported_at_ms'])}")
    return f'<td class="{role}" data-instance="{html.escape(entry["instance"])}">' + (
        "<br>".join(parts) + "</td>"
    )


def _refresh_s(given: str | None) -> int:
    if given is None:
        return REFRESH_S
    try:
        seconds = int(given)
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST,
            f"refresh={given!r}: give the seconds between redraws as a whole number (0: never)",
        )
    return seconds


def _app_section(view: dict[str, Any]) -> str:
    app = view["app"]
    aid = html.escape(app)
    out = [f'<section class="app" id="app-{aid}" data-app="{aid}">']
    out.append(
        f'<h2>{aid} <small>DAG <a href="../dags/{html.escape(view["dag_id"])}" target="_top">'
        f"{html.escape(view['dag_id'])}</a></small></h2>"
    )
    if view.get("error"):
        out.append(f'<p class="error">Cannot read this app: {html.escape(view["error"])}</p>')
        return "\n".join(out + ["</section>"])
    if view.get("job_error"):
        out.append(f'<p class="error">Its job file failed to load: {_e(view["job_error"])}</p>')
    gen = view["generation"]
    if gen is None:
        out.append(
            '<p class="generation" data-generation="">No generation yet: every run owns every '
            "task (one instance). The first rebalance computes generation 1.</p>"
        )
    else:
        probing = " A probing rebalance is due." if view["probing_rebalance_needed"] else ""
        out.append(
            f'<p class="generation" data-generation="{gen}">Generation <b>{gen}</b> '
            f"({_e(view['reason'])}), computed {_time(view['at_ms'])}.{probing}</p>"
        )
    out.append(
        f'<p><button class="rebalance" data-app="{aid}" '
        f'data-url="api/apps/{aid}/rebalance">Rebalance now</button> '
        f'<span class="message" id="message-{aid}"></span> '
        f'<a href="api/apps/{aid}/assignment">JSON</a></p>'
    )

    out.append("<h3>Instances</h3>")
    out.append(
        '<table class="instances"><tr><th>Instance</th><th>Queue</th><th>Capacity</th>'
        "<th>Active</th><th>Warmup</th><th>Standby</th><th>Last report</th></tr>"
    )
    for i in view["instances"]:
        left = "" if i["configured"] else " (not in the latest generation)"
        out.append(
            f'<tr data-instance="{html.escape(i["name"])}"><td>{html.escape(i["name"])}{left}'
            f"</td><td>{_e(i['queue'])}</td><td>{_e(i['capacity'])}</td><td>{i['active']}</td>"
            f"<td>{i['warmup']}</td><td>{i['standby']}</td>"
            f"<td>{_time(i['last_report_at_ms'])}</td></tr>"
        )
    if not view["instances"]:
        out.append('<tr><td colspan="7">No instance has reported yet.</td></tr>')
    out.append("</table>")

    names = [i["name"] for i in view["instances"]]
    acceptable = view["acceptable_recovery_lag"]
    out.append(f"<h3>Tasks</h3><p>Caught up: lag at most {acceptable:,} records.</p>")
    out.append(
        '<table class="tasks"><tr><th>Task</th><th>Active</th><th>Warmup</th><th>Standby</th>'
        "<th>Last batch</th><th>Committed at</th><th>Input lag</th>"
        + "".join(f"<th>{html.escape(n)}</th>" for n in names)
        + "</tr>"
    )
    for t in view["tasks"]:
        cells = {e["instance"]: e for e in t["instances"]}
        pending = "" if t["pending_batch"] is None else f" (batch {t['pending_batch']} pending)"
        out.append(
            f'<tr data-task="{html.escape(t["task"])}"><td>{html.escape(t["task"])}</td>'
            f'<td class="active">{_e(t["active"])}</td><td>{_names(t["warmup"])}</td>'
            f"<td>{_names(t['standby'])}</td><td>{t['last_batch']}{pending}</td>"
            f"<td>{_time(t['last_commit_at_ms'])}</td><td>{_e(t['input_lag'])}</td>"
            + "".join(_instance_cell(cells.get(n), acceptable) for n in names)
            + "</tr>"
        )
    if not view["tasks"]:
        out.append(f'<tr><td colspan="{7 + len(names)}">No task yet: no input topic.</td></tr>')
    out.append("</table>")

    out.append("<h3>History</h3>")
    out.append(
        '<table class="history"><tr><th>Generation</th><th>Computed</th><th>Reason</th>'
        "<th>Instances</th><th>Tasks moved</th><th>Warmups</th><th>Standbys</th></tr>"
    )
    for g in view["history"]:
        out.append(
            f'<tr data-generation="{g["generation"]}"><td>{g["generation"]}</td>'
            f"<td>{_time(g['at_ms'])}</td><td>{_e(g['reason'])}</td>"
            f"<td>{_names([i['name'] for i in g['instances']])}</td>"
            f"<td>{_names(g['moved'])}</td><td>{g['warmups']}</td><td>{g['standbys']}</td></tr>"
        )
    if not view["history"]:
        out.append('<tr><td colspan="7">No generation yet.</td></tr>')
    out.append("</table></section>")
    return "\n".join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 1rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 1rem; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.role { font-weight: 600; } .role.active { color: #1a7f37; } .role.warmup { color: #9a6700; }
.role.standby { color: #0969da; } .role.none { color: #777; }
.error { color: #b00020; } small { font-weight: normal; color: #555; }
section.app { border-top: 2px solid #ddd; padding-top: .5rem; }
"""

_SCRIPT = """
let rebalancing = 0;
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.rebalance");
  if (!button) return;
  const message = document.getElementById("message-" + button.dataset.app);
  button.disabled = true;
  rebalancing += 1;
  message.textContent = "rebalancing...";
  try {
    const response = await fetch(button.dataset.url, {method: "POST", credentials: "same-origin"});
    const body = await response.json().catch(() => ({}));
    if (response.ok && body.rebalance.changed) {
      message.textContent = "generation " + body.rebalance.new.generation + " in force";
      window.location.reload();
      return;
    } else if (response.ok) {
      message.textContent = "no change: the assignment computed is the current one";
    } else {
      message.textContent = "failed (" + response.status + "): " + (body.error || body.detail);
    }
    button.disabled = false;
  } finally {
    rebalancing -= 1;
  }
});
// The redraw swaps each app's section for a fresh one, not the page: a message or a
// rebalance under way stays where it is.
async function redraw() {
  if (rebalancing > 0) return;
  const response = await fetch(window.location.href, {credentials: "same-origin"});
  if (!response.ok || rebalancing > 0) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const section of fresh.querySelectorAll("section.app")) {
    const shown = document.getElementById(section.id);
    if (shown && !shown.querySelector("button.rebalance[disabled]")) shown.replaceWith(section);
  }
  document.body.dataset.redrawn = String(Number(document.body.dataset.redrawn || 0) + 1);
}
const every = Number(document.body.dataset.refreshS);
if (every > 0) setInterval(() => redraw().catch(() => {}), every * 1000);
"""


def render_page(views: list[dict[str, Any]], refresh_s: int = REFRESH_S) -> str:
    """The page's HTML for ``views`` (``_view``'s). Every link is relative to the page's
    own address (``<base>/lakestate/``), so the page works under any Airflow base URL; it
    redraws its apps every ``refresh_s`` seconds (0: never)."""
    body = "\n".join(_app_section(v) for v in views) or "<p>No lakestate app found.</p>"
    names = [html.escape(v["app"]) for v in views]
    links = ", ".join(f'<a href="?app={n}">{n}</a>' for n in names) or "none"
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>lakestate assignment</title>'
        f'<style>{_STYLE}</style></head><body data-refresh-s="{refresh_s}">'
        "<h1>lakestate task assignment</h1>"
        f'<p>Apps: {links} (<a href="./">all</a>)</p>'
        f"{body}<script>{_SCRIPT}</script></body></html>"
    )


class LakestateAssignmentPlugin(AirflowPlugin):
    """The page and the REST endpoints above, and the UI's navigation entry to the page."""

    name = "lakestate_assignment"
    fastapi_apps = [{"app": api, "url_prefix": URL_PREFIX, "name": "lakestate assignment"}]
    external_views = [
        {
            "name": "lakestate",  # the sidebar's label: longer names are cut
            "href": f"{URL_PREFIX}/",
            "url_route": UI_ROUTE,
            "destination": "nav",
            "nav_top_level": True,
        }
    ]


__all__ = ["LakestateAssignmentPlugin", "api", "dag_id_of", "render_page"]
