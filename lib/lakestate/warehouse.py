"""Where lakestate keeps its tables: one warehouse directory.

Layout::

    <root>/topics/<topic>                 log tables (the embedded stand-in for Kafka topics)
    <root>/apps/<app>/state/<store>       state tables, one per store
    <root>/apps/<app>/_offsets            the app's committed source offsets (engine)
    <root>/apps/<app>/_batches            the app's batch history (engine)

The root comes from ``--warehouse DIR``, else env ``LAKESTATE_WAREHOUSE``, else
``./warehouse``. A local root is made absolute; a URI root (``s3://bucket/wh``) is kept as
given, and its paths are joined with ``/``. Listing works on local roots and on the S3 API
(``s3://``, ``s3a://``: ``lakestate.object_store``, its settings from the environment).

Paths are returned as ``str``: what Spark's readers and writers take.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from lakestate import object_store

__all__ = ["DEFAULT_WAREHOUSE", "StateTable", "Warehouse", "validate_name"]

DEFAULT_WAREHOUSE = "warehouse"
WAREHOUSE_ENV = "LAKESTATE_WAREHOUSE"

# Kafka's rule for topic names, applied to apps and stores too: they become directory names.
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def validate_name(kind: str, name: str) -> str:
    """``name`` if it is a legal topic/app/store name (Kafka's rule: ASCII letters, digits,
    ``.``, ``_``, ``-``; at most 249 characters; not ``.`` or ``..``), else ``ValueError``."""
    if not isinstance(name, str) or not _LEGAL_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"illegal {kind} name {name!r}: use 1-249 characters of ASCII letters, digits, "
            "'.', '_' and '-' (and not '.' or '..')"
        )
    return name


class StateTable(NamedTuple):
    """A state table found in the warehouse."""

    app: str
    store: str
    path: str


def _is_uri(root: str) -> bool:
    return "://" in root


class Warehouse:
    """Path resolution for one warehouse root."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None or str(root) == "":
            root = os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE
        root = os.fspath(root)
        self.root: str = root.rstrip("/") if _is_uri(root) else str(Path(root).resolve())

    def __repr__(self) -> str:
        return f"Warehouse({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Warehouse) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    @property
    def is_local(self) -> bool:
        return not _is_uri(self.root) or self.root.startswith("file://")

    def _join(self, *parts: str) -> str:
        if _is_uri(self.root):
            return "/".join((self.root, *parts))
        return str(Path(self.root, *parts))

    def relative(self, path: str) -> str:
        """``path`` (a table under the root) relative to the root, ``/``-separated: how
        lakestate's own tables name each other, so a warehouse can move."""
        root = self.root.rstrip("/") + "/"
        return path[len(root) :] if path.startswith(root) else path

    def resolve(self, name: str) -> str:
        """The path of a table named relative to the root (an absolute path as it is)."""
        if name.startswith("/") or _is_uri(name):
            return name
        return self._join(*name.split("/"))

    def check(self) -> None:
        """Fail at once (``ObjectStoreError``, one line naming the setting) when the root is
        on an object store that cannot be used: unreachable, no bucket, credentials refused.
        Nothing to check for a local root."""
        if object_store.is_s3(self.root):
            object_store.check(self.root)

    def _listable_root(self) -> str:
        if not object_store.is_s3(self.root):
            raise ValueError(
                f"listing a warehouse at {self.root} is not supported: use a local folder, "
                "s3://BUCKET/PREFIX or s3a://BUCKET/PREFIX"
            )
        return self.root

    def _folders(self, *parts: str) -> list[str]:
        """The names of the folders right under ``parts`` (relative to the root), sorted."""
        if self.is_local:
            base = Path(self.root.removeprefix("file://"), *parts)
            return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        return object_store.list_folders("/".join((self._listable_root(), *parts)))

    def _is_table(self, *parts: str) -> bool:
        """Whether a Delta table (a ``_delta_log`` folder) is at ``parts``."""
        if self.is_local:
            return Path(self.root.removeprefix("file://"), *parts, "_delta_log").is_dir()
        return object_store.table_exists("/".join((self._listable_root(), *parts)))

    # -- topics ---------------------------------------------------------------------------

    def topics_dir(self) -> str:
        return self._join("topics")

    def topic_path(self, name: str) -> str:
        """The log table of topic ``name``."""
        return self._join("topics", validate_name("topic", name))

    def source_path(self, name: str) -> str:
        """The folder of Delta source ``name`` (a Delta table read as a topic): its
        declaration and offset index (``lakestate.io.deltasource``)."""
        return self._join("sources", validate_name("topic", name))

    def sink_path(self, name: str) -> str:
        """The folder of Delta sink ``name`` (a typed Delta table written as a topic): its
        declaration (``lakestate.io.deltasink``)."""
        return self._join("sinks", validate_name("topic", name))

    def list_sinks(self) -> list[str]:
        """Names of the declared Delta sinks, sorted."""
        return [s for s in self._folders("sinks") if self._is_table("sinks", s, "declaration")]

    def list_topics(self) -> list[str]:
        """Names of the topics that exist (a ``_delta_log`` directory), sorted."""
        return [t for t in self._folders("topics") if self._is_table("topics", t)]

    # -- apps -----------------------------------------------------------------------------

    def apps_dir(self) -> str:
        return self._join("apps")

    def app_path(self, app: str) -> str:
        """The folder of app ``app`` (its state tables, offsets, batch history)."""
        return self._join("apps", validate_name("app", app))

    def changelog_path(self, app: str, store: str) -> str:
        """The changelog table of store ``store`` of app ``app``."""
        return self._join(
            "apps", validate_name("app", app), "changelog", validate_name("store", store)
        )

    def progress_path(self, app: str) -> str:
        """The app's progress table: a row per task per batch (written by the engine)."""
        return self._join("apps", validate_name("app", app), "_progress")

    def layout_path(self, app: str) -> str:
        """The app's sub-topologies as its last run saw them (checkpoint/recorded_layout.py)."""
        return self._join("apps", validate_name("app", app), "_layout")

    def old_format_path(self, app: str) -> str:
        """The batch log of lakestate's first state format (MERGE-based state tables)."""
        return self._join("apps", validate_name("app", app), "_batches")

    def list_apps(self) -> list[str]:
        """Names of the app folders, sorted."""
        return self._folders("apps")

    def list_state_tables(self, app: str | None = None) -> list[StateTable]:
        """The changelog tables (``<app>/changelog/<store>`` holding a ``_delta_log``),
        sorted by app then store; only ``app``'s when given."""
        apps = [validate_name("app", app)] if app is not None else self.list_apps()
        return [
            StateTable(name, store, self._join("apps", name, "changelog", store))
            for name in apps
            for store in self._folders("apps", name, "changelog")
            if self._is_table("apps", name, "changelog", store)
        ]
