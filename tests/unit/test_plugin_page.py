"""The assignment plugin's page (plugins/lakestate_assignment.py) as HTML: links relative to
the page, so it works under any Airflow base URL, and the redraw interval."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "lakestate_assignment.py"


@pytest.fixture(scope="module")
def plugin():
    spec = importlib.util.spec_from_file_location("lakestate_assignment_page", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _view(app: str) -> dict:
    return {"app": app, "dag_id": f"lakestate_{app}", "error": "no table yet"}


def test_every_link_is_relative_to_the_page(plugin) -> None:
    page = plugin.render_page([_view("demo"), _view("orders")])
    targets = re.findall(r'(?:href|data-url|src)="([^"]*)"', page)
    assert targets, page
    # An absolute path would leave Airflow's base URL (e.g. https://host/airflow/).
    assert [t for t in targets if t.startswith("/") or "://" in t] == []
    assert "../dags/lakestate_demo" in targets and "./" in targets and "?app=orders" in targets


def test_the_page_redraws_itself_every_refresh_seconds(plugin) -> None:
    assert f'data-refresh-s="{plugin.REFRESH_S}"' in plugin.render_page([])
    assert 'data-refresh-s="0"' in plugin.render_page([], refresh_s=0)
    assert plugin._refresh_s(None) == plugin.REFRESH_S and plugin._refresh_s("5") == 5


@pytest.mark.parametrize("bad", ["soon", "-1", "1.5"])
def test_a_bad_refresh_is_a_400_that_says_what_to_give(plugin, bad: str) -> None:
    with pytest.raises(plugin.HTTPException) as caught:
        plugin._refresh_s(bad)
    assert caught.value.status_code == 400 and "whole number" in caught.value.detail
