"""The versioned key-value store (state/versioned.py, KIP-889 + KIP-914's put return codes)
over both backends: put return codes, replacing, tombstones as versions, gets latest and as
of a time inside and beyond history retention, delete, expiry as the observed stream time
advances, transactions (rollback, commit, reopen, isolation), changelog rows (an SCD type 2
table) and restoring a fresh store from them; a property test against a plain model; the
test driver's ``get_versioned_key_value_store``; ``Materialized.as_versioned``."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from datetime import timedelta
from pathlib import Path

import lakestate as ls
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, StreamsBuilder, TopologyException
from lakestate.errors import InvalidStateStoreException, StreamsException
from lakestate.state.base import IsolationLevel, Transaction
from lakestate.state.keys import encode_i64_be, encode_key
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import open_view, view_class
from lakestate.state.rocksdb import rocksdb_store
from lakestate.state.versioned import (
    EXPIRY_PREFIX,
    STREAM_TIME_KEY,
    VERSION_PREFIX,
    VersionedKeyValueStore,
    VersionedRecord,
)
from lakestate.testing.driver import TopologyTestDriver
from state_backends import BACKENDS, store_factories

NAME = "tiers"
NOT_PUT = ls.PUT_RETURN_CODE_NOT_PUT
LATEST = -1
KIND = view_class("versioned")


@pytest.fixture(params=BACKENDS)
def store_factory(request, tmp_path):
    yield from store_factories(request, tmp_path)


class Holder:
    """Hands out the current transaction, as a task does; keeps every committed batch's
    writes, as the engine turns them into changelog rows."""

    def __init__(self, store) -> None:
        self.store = store
        self.txn: Transaction = store.new_transaction()
        self.batches: list[list[tuple[bytes, bytes | None]]] = []

    def commit(self) -> None:
        self.batches.append([(k, v) for ns, k, v in self.txn.changes() if ns == NAME])
        self.txn.commit()
        self.txn = self.store.new_transaction()

    def view(self, retention_ms: int = 10) -> VersionedKeyValueStore:
        return VersionedKeyValueStore(NAME, lambda: self.txn, history_retention_ms=retention_ms)


def raw_entries(reader, prefix: bytes = b"") -> dict[bytes, bytes]:
    return {k: v for k, v in reader.iterate(NAME, None, None, False) if k.startswith(prefix)}


def key_prefix(key: str) -> bytes:
    """The start of every version entry of ``key``."""
    return VERSION_PREFIX + encode_key(key)


def changelog(batches) -> dict[bytes, bytes]:
    """The changelog as a SQL view reads it: the latest row per raw key, tombstones removed
    (index-only entries never become rows)."""
    latest: dict[bytes, bytes | None] = {}
    for batch in batches:
        for raw_key, raw_value in batch:
            if not KIND.is_index_only(raw_key):
                latest[raw_key] = raw_value
    return {k: v for k, v in latest.items() if v is not None}


# -- put, get, delete ----------------------------------------------------------------------


def test_put_returns_minus_one_for_the_latest_and_the_next_timestamp_otherwise(store_factory):
    v = Holder(store_factory()).view(retention_ms=100)
    assert v.put("k", "a", 10) == LATEST
    assert v.put("k", "b", 20) == LATEST
    assert v.put("k", "c", 15) == 20  # between: valid until b
    assert v.put("k", "d", 5) == 10  # before every version: valid until a
    assert v.get("k") == VersionedRecord("b", 20, None)
    assert v.get("k", 4) is None  # before the first version
    assert v.get("k", 5) == VersionedRecord("d", 5, 10)
    assert v.get("k", 12) == VersionedRecord("a", 10, 15)  # a now ends where c starts
    assert v.get("k", 15) == VersionedRecord("c", 15, 20)  # as_of is inclusive
    assert v.get("k", 19) == VersionedRecord("c", 15, 20)
    assert v.get("k", 10**12) == VersionedRecord("b", 20, None)
    assert v.get("other") is None and v.get("other", 15) is None
    assert v.observed_stream_time() == 20


def test_a_put_at_an_existing_timestamp_replaces_that_version(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=100)
    v.put("k", "a", 10)
    v.put("k", "b", 20)
    assert v.put("k", "a2", 10) == 20
    assert v.put("k", "b2", 20) == LATEST
    assert v.get("k", 10) == VersionedRecord("a2", 10, 20)
    assert v.get("k") == VersionedRecord("b2", 20, None)
    assert len(raw_entries(holder.txn, VERSION_PREFIX)) == 2  # still two versions


def test_tombstones_are_versions(store_factory):
    v = Holder(store_factory()).view(retention_ms=100)
    v.put("k", "a", 10)
    assert v.put("k", None, 20) == LATEST
    assert v.get("k") is None
    assert v.get("k", 25) is None
    assert v.get("k", 15) == VersionedRecord("a", 10, 20)  # ended by the tombstone
    # An older put still sees the tombstone after it.
    assert v.put("k", "b", 15) == 20
    assert v.get("k", 17) == VersionedRecord("b", 15, 20)
    assert v.get("k") is None
    # A tombstone between versions, and replacing a tombstone with a value and back.
    assert v.put("k", None, 12) == 15
    assert v.get("k", 13) is None
    assert v.get("k", 11) == VersionedRecord("a", 10, 12)
    assert v.put("k", "c", 12) == 15
    assert v.get("k", 13) == VersionedRecord("c", 12, 15)
    # A tombstone for a key never seen is a version too (as Kafka's "degenerate segment").
    assert v.put("j", None, 30) == LATEST
    assert v.put("j", "x", 25) == 30
    assert v.get("j", 27) == VersionedRecord("x", 25, 30)
    assert v.get("j") is None
    # A new value after a latest tombstone is the latest again.
    assert v.put("k", "d", 40) == LATEST
    assert v.get("k") == VersionedRecord("d", 40, None)
    assert v.get("k", 39) is None


def test_not_put_exactly_beyond_the_retention_boundary(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    v.put("k", "a", 100)
    assert v.put("j", "at-boundary", 90) == LATEST  # 90 == 100 - 10: still accepted
    assert v.put("k", "older", 90) == 100
    assert v.put("m", "late", 89) == NOT_PUT
    assert v.put("k", "late", 89) == NOT_PUT
    assert v.get("m") is None and v.get("m", 95) is None
    assert v.get("k", 95) == VersionedRecord("older", 90, 100)
    # A refused put changes nothing, the stream time included.
    before = raw_entries(holder.txn)
    assert v.put("k", None, 80) == NOT_PUT
    assert raw_entries(holder.txn) == before
    assert v.observed_stream_time() == 100


def test_get_as_of_beyond_history_retention(store_factory):
    v = Holder(store_factory()).view(retention_ms=10)
    v.put("k", "a", 0)
    v.put("k", "b", 5)
    v.put("j", "x", 92)
    v.put("j", "y", 95)
    v.put("other", "z", 100)  # stream time 100: retention reaches back to 90
    assert v.get("j", 92) == VersionedRecord("x", 92, 95)  # inside retention
    assert v.get("j", 90) is None  # inside retention, before j's first version
    # Beyond retention only the latest version answers, if it is valid then.
    assert v.get("k", 50) == VersionedRecord("b", 5, None)
    assert v.get("k", 89) == VersionedRecord("b", 5, None)
    assert v.get("k", 3) is None  # a was valid at 3, but that is beyond retention
    assert v.get("j", 89) is None
    assert v.get("k", 4) is None


def test_the_latest_version_never_expires(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    v.put("k", "a", 0)
    v.put("j", "x", 10**9)
    assert v.get("k") == VersionedRecord("a", 0, None)
    assert v.get("k", 0) == VersionedRecord("a", 0, None)
    assert v.get("k", 10**6) == VersionedRecord("a", 0, None)
    # And it still ends where a newer version starts.
    assert v.put("k", "b", 10**9 - 5) == LATEST
    assert v.get("k", 10**9 - 5) == VersionedRecord("b", 10**9 - 5, None)


def test_delete_returns_the_version_valid_at_its_timestamp(store_factory):
    v = Holder(store_factory()).view(retention_ms=100)
    v.put("k", "a", 10)
    v.put("k", "b", 20)
    assert v.delete("k", 15) == VersionedRecord("a", 10, 20)
    assert v.get("k", 15) is None
    assert v.get("k", 12) == VersionedRecord("a", 10, 15)
    assert v.get("k") == VersionedRecord("b", 20, None)
    assert v.delete("k", 25) == VersionedRecord("b", 20, None)
    assert v.get("k") is None
    assert v.get("k", 22) == VersionedRecord("b", 20, 25)
    assert v.delete("absent", 30) is None
    assert v.observed_stream_time() == 30


def test_delete_beyond_retention_does_nothing_and_returns_none(store_factory):
    v = Holder(store_factory()).view(retention_ms=10)
    v.put("k", "a", 1)
    v.put("other", "x", 100)
    assert v.delete("k", 89) is None  # a is valid at 89, but the delete is too late
    assert v.get("k") == VersionedRecord("a", 1, None)
    assert v.delete("k", 90) == VersionedRecord("a", 1, None)
    assert v.get("k") is None


def test_bad_arguments_write_nothing(store_factory):
    holder = Holder(store_factory())
    v = holder.view()
    with pytest.raises(StreamsException, match="None"):
        v.put(None, "a", 1)
    with pytest.raises(ls.SerializationException):
        v.put("k", "a", 2**63)  # not a 64-bit timestamp
    with pytest.raises(ls.SerializationException):
        v.put("k", {1, 2}, 1)  # not a JSON value
    assert raw_entries(holder.txn) == {}
    with pytest.raises(StreamsException, match="positive"):
        VersionedKeyValueStore(NAME, lambda: holder.txn, history_retention_ms=0)


# -- expiry --------------------------------------------------------------------------------


def test_versions_expire_as_stream_time_advances(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    v.put("k", "a", 0)
    v.put("k", "b", 5)
    v.put("k", "c", 8)
    assert len(raw_entries(holder.txn, VERSION_PREFIX)) == 3
    holder.commit()
    # Other keys advance the stream time (each holds only its latest version).
    v.put("j1", "x", 14)  # cutoff 4: a is valid to 5, still reachable by get(k, 4)
    assert len(raw_entries(holder.txn, key_prefix("k"))) == 3
    assert v.get("k", 4) == VersionedRecord("a", 0, 5)
    v.put("j2", "y", 15)  # cutoff 5: a can no longer be reached
    versions = raw_entries(holder.txn, key_prefix("k"))
    assert [KIND.changelog_row(k, r)["value"] for k, r in versions.items()] == ['"b"', '"c"']
    assert v.get("k", 5) == VersionedRecord("b", 5, 8)
    v.put("j3", "z", 18)  # cutoff 8: b expires; c, the latest of k, stays
    versions = raw_entries(holder.txn, key_prefix("k"))
    assert [KIND.changelog_row(k, r)["value"] for k, r in versions.items()] == ['"c"']
    assert v.get("k", 8) == VersionedRecord("c", 8, None)
    # The expiry index holds exactly the versions that will expire (none left here).
    assert raw_entries(holder.txn, EXPIRY_PREFIX) == {}
    # Expired versions leave as deletes: tombstone rows in the changelog.
    holder.commit()
    deleted = [k for k, raw in holder.batches[-1] if raw is None and k.startswith(VERSION_PREFIX)]
    assert deleted == [key_prefix("k") + encode_i64_be(0), key_prefix("k") + encode_i64_be(5)]


def test_a_latest_tombstone_expires_and_the_key_is_gone(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    v.put("k", "a", 0)
    v.delete("k", 20)
    v.put("j", "x", 29)  # cutoff 19: the tombstone at 20 still answers get(k, 19)
    assert v.get("k", 19) == VersionedRecord("a", 0, 20)
    v.put("j", "y", 30)  # cutoff 20: nothing of k can be reached or changed by a put
    assert raw_entries(holder.txn, key_prefix("k")) == {}
    assert v.get("k") is None and v.get("k", 25) is None
    assert v.put("k", "b", 20) == LATEST  # at the cutoff: accepted, and the latest


def test_a_version_ended_at_the_cutoff_is_deleted_when_written(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    v.put("p", "p1", 2)
    v.put("p", "p2", 20)  # cutoff 10: p1, valid to 20, is reachable
    assert v.get("p", 10) == VersionedRecord("p1", 2, 20)
    assert v.put("p", "mid", 10) == 20  # at the cutoff: p1 now ends at 10, unreachable
    assert [
        KIND.changelog_row(k, r)["value"]
        for k, r in raw_entries(holder.txn).items()
        if k.startswith(key_prefix("p"))
    ] == ['"mid"', '"p2"']
    assert v.get("p", 10) == VersionedRecord("mid", 10, 20)
    assert v.get("p", 9) is None
    # A tombstone at the cutoff for a key without versions ends nothing reachable.
    assert v.put("q", None, 10) == LATEST
    assert raw_entries(holder.txn, key_prefix("q")) == {}
    assert v.put("q", "v", 10) == LATEST
    assert v.get("q") == VersionedRecord("v", 10, None)


# -- transactions --------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_rollback_leaves_nothing(store_factory, isolation):
    holder = Holder(store_factory(isolation))
    v = holder.view()
    v.put("k", "a", 10)
    v.put("k", "b", 20)
    v.delete("j", 30)
    holder.txn.close()
    holder.txn = holder.store.new_transaction()
    assert raw_entries(holder.txn) == {}
    assert v.get("k") is None and v.observed_stream_time() is None
    assert v.put("k", "c", 0) == LATEST  # no stream time left to refuse it


@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_commit_and_reopen_keep_everything(store_factory, isolation):
    store = store_factory(isolation)
    holder = Holder(store)
    v = holder.view()
    v.put("k", "a", 10)
    v.put("k", "b", 20)
    v.put("k", None, 15)
    holder.commit()
    before = raw_entries(store)
    holder.txn.close()
    store = store_factory.reopen(store)
    holder = Holder(store)
    v = holder.view()
    assert raw_entries(store) == before
    assert v.get("k") == VersionedRecord("b", 20, None)
    assert v.get("k", 16) is None
    assert v.get("k", 12) == VersionedRecord("a", 10, 15)
    assert v.observed_stream_time() == 20
    assert v.put("k", "late", 9) == NOT_PUT  # the stream time survived


@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_readers_outside_the_transaction_see_what_the_isolation_level_allows(
    store_factory, isolation
):
    store = store_factory(isolation)
    holder = Holder(store)
    holder.view().put("k", "a", 10)
    query = VersionedKeyValueStore(NAME, lambda: store, history_retention_ms=10)
    if isolation is IsolationLevel.READ_COMMITTED:
        assert query.get("k") is None and query.observed_stream_time() is None
    else:
        assert query.get("k") == VersionedRecord("a", 10, None)
    holder.commit()
    assert query.get("k", 10) == VersionedRecord("a", 10, None)
    assert list(query.all()) == [("k", VersionedRecord("a", 10, None))]
    with pytest.raises(InvalidStateStoreException, match="read-only"):
        query.put("k", "b", 11)


# -- changelog rows (SCD type 2) and restore -----------------------------------------------


def test_changelog_rows_form_an_scd2_table(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10**6)
    v.put(42, "silver", 1000)
    holder.commit()
    assert [KIND.changelog_row(k, r) for k, r in changelog(holder.batches).items()] == [
        {"key": "42", "value": '"silver"', "valid_from": 1000, "valid_to": None}
    ]
    v.put(42, "gold", 2000)
    v.put(7, "bronze", 1500)
    holder.commit()
    # The silver version's row was rewritten: it now ends where gold starts.
    assert {
        KIND.changelog_row(k, r)["value"]: KIND.changelog_row(k, r)["valid_to"]
        for k, r in changelog(holder.batches[-1:]).items()
    } == {'"silver"': 2000, '"gold"': None, '"bronze"': None}
    v.put(42, "platinum", 1500)  # out of order: between silver and gold
    v.delete(42, 3000)
    holder.commit()
    rows = [KIND.changelog_row(k, r) for k, r in changelog(holder.batches).items()]

    # The two questions, as plain SQL over those rows.
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE tiers (key TEXT, value TEXT, valid_from INT, valid_to INT)")
    db.executemany("INSERT INTO tiers VALUES (:key, :value, :valid_from, :valid_to)", rows)

    def tier_at(t: int) -> list:
        return db.execute(
            "SELECT value FROM tiers WHERE key = '42' AND valid_from <= ? "
            "AND (valid_to IS NULL OR valid_to > ?)",
            (t, t),
        ).fetchall()

    assert tier_at(999) == []
    assert tier_at(1000) == [('"silver"',)]
    assert tier_at(1499) == [('"silver"',)]
    assert tier_at(1500) == [('"platinum"',)]
    assert tier_at(2500) == [('"gold"',)]
    assert tier_at(3000) == [(None,)]  # deleted: the tombstone version, value null
    assert db.execute(
        "SELECT value, valid_from, valid_to FROM tiers WHERE key = '42' ORDER BY valid_from"
    ).fetchall() == [
        ('"silver"', 1000, 1500),
        ('"platinum"', 1500, 2000),
        ('"gold"', 2000, 3000),
        (None, 3000, None),
    ]
    # Each SQL answer is what the store answers (a null value: the key was deleted).
    for t in (999, 1000, 1499, 1500, 2500, 3000, 4000):
        found = v.get(42, t)
        answer = [None if text is None else json.loads(text) for (text,) in tier_at(t)]
        assert answer == ([] if t < 1000 else [None if found is None else found.value])


def test_index_entries_and_stream_time_are_not_changelog_rows(store_factory):
    holder = Holder(store_factory())
    v = holder.view()
    v.put("k", "a", 1)
    v.put("k", "b", 2)
    holder.commit()
    keys = [k for k, _ in holder.batches[-1]]
    assert STREAM_TIME_KEY in keys and any(k.startswith(EXPIRY_PREFIX) for k in keys)
    for raw_key, raw in holder.batches[-1]:
        assert KIND.is_index_only(raw_key) == (not raw_key.startswith(VERSION_PREFIX))
        if KIND.is_index_only(raw_key):
            assert KIND.changelog_row(raw_key, raw or b"") is None


def test_restore_from_changelog_rows_gives_the_same_store(store_factory):
    holder = Holder(store_factory())
    v = holder.view(retention_ms=10)
    for i, (key, value, ts) in enumerate(
        [("k", "a", 0), ("k", "b", 6), ("j", None, 3), ("k", "c", 4), ("m", "x", 12)]
        + [("j", "y", 11), ("k", None, 14), ("m", "z", 13), ("k", "d", 17), ("n", "w", 21)]
    ):
        v.put(key, value, ts)
        if i % 3 == 2:
            holder.commit()
    holder.commit()
    original = raw_entries(holder.store)

    # A fresh store from the rows at once, and one caught up batch by batch.
    fresh = Holder(store_factory())
    KIND.restore_entries(fresh.txn, NAME, list(changelog(holder.batches).items()))
    fresh.commit()
    assert raw_entries(fresh.store) == original
    stepwise = Holder(store_factory())
    for n in range(1, len(holder.batches) + 1):
        rows = {k: r for b in holder.batches[n - 1 : n] for k, r in b}  # one per key
        rows = {k: r for k, r in rows.items() if not KIND.is_index_only(k)}
        for raw_key, raw in rows.items():
            KIND.restore_entry(stepwise.txn, NAME, raw_key, raw)
        stepwise.commit()
    assert raw_entries(stepwise.store) == original
    restored = stepwise.view(retention_ms=10)
    assert restored.observed_stream_time() == 21
    assert restored.put("k", "late", 10) == NOT_PUT
    assert restored.put("k", "e", 12) == 14


def test_open_view_passes_the_retention_option(store_factory):
    holder = Holder(store_factory())
    view = open_view(NAME, "versioned", {"history_retention_ms": 5}, lambda: holder.txn)
    assert isinstance(view, VersionedKeyValueStore) and view.history_retention_ms == 5


# -- property: the store against a plain model ----------------------------------------------


class Model:
    """key -> {timestamp: value (None: tombstone)}, every version ever put, plus the
    observed stream time; answers by Kafka's rules."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.versions: dict[str, dict[int, str | None]] = {}
        self.stream_time: int | None = None

    def beyond(self, ts: int) -> bool:
        return self.stream_time is not None and ts < self.stream_time - self.retention

    def put(self, key: str, value: str | None, ts: int) -> int:
        if self.beyond(ts):
            return NOT_PUT
        self.stream_time = ts if self.stream_time is None else max(self.stream_time, ts)
        versions = self.versions.setdefault(key, {})
        versions[ts] = value
        later = [t for t in versions if t > ts]
        return min(later) if later else LATEST

    def get(self, key: str, as_of: int | None = None) -> VersionedRecord | None:
        versions = self.versions.get(key, {})
        if not versions:
            return None
        if as_of is None or self.beyond(as_of):
            latest = max(versions)
            if versions[latest] is None or (as_of is not None and latest > as_of):
                return None
            return VersionedRecord(versions[latest], latest, None)
        earlier = [t for t in versions if t <= as_of]
        if not earlier:
            return None
        ts = max(earlier)
        later = [t for t in versions if t > ts]
        value = versions[ts]
        return None if value is None else VersionedRecord(value, ts, min(later) if later else None)

    def delete(self, key: str, ts: int) -> VersionedRecord | None:
        if self.beyond(ts):
            return None
        old = self.get(key, ts)
        self.put(key, None, ts)
        return old


KEYS = ["a", "b", "c"]
TIMES = st.integers(0, 60)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.none() | st.sampled_from("xyz"), TIMES),
        st.tuples(st.just("delete"), st.sampled_from(KEYS), TIMES),
        st.tuples(st.just("get"), st.sampled_from(KEYS), st.none() | st.integers(-1, 70)),
        st.tuples(
            st.just("get_many"), st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-1, 70)))
        ),
        st.tuples(st.just("commit")),
        st.tuples(st.just("rollback")),
    ),
    max_size=60,
)


def _check_against_model(kind: str, retention: int, ops: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        make = (
            (lambda n: in_memory_store(n, IsolationLevel.READ_COMMITTED))
            if kind == "memory"
            else (lambda n: rocksdb_store(n, Path(tmp) / n, IsolationLevel.READ_COMMITTED))
        )
        store = make("s")
        holder = Holder(store)
        v = holder.view(retention)
        model, committed = Model(retention), Model(retention)
        for op in ops:
            if op[0] == "put":
                assert v.put(*op[1:]) == model.put(*op[1:]), op
            elif op[0] == "delete":
                assert v.delete(*op[1:]) == model.delete(*op[1:]), op
            elif op[0] == "get":
                assert v.get(*op[1:]) == model.get(*op[1:]), op
            elif op[0] == "get_many":
                assert v.get_many_as_of(op[1]) == [model.get(k, t) for k, t in op[1]], op
            elif op[0] == "commit":
                holder.commit()
                committed = _copy(model)
            else:
                holder.txn.close()
                holder.txn = store.new_transaction()
                model = _copy(committed)
        holder.commit()
        # Every answer agrees, and only reachable versions are held.
        assert v.observed_stream_time() == model.stream_time
        for key in KEYS:
            assert v.get(key) == model.get(key)
            for as_of in range(-1, 72):
                assert v.get(key, as_of) == model.get(key, as_of), (key, as_of)
        # Read together (with no writes pending: RocksDB's one-iterator path), the same.
        lookups = [(key, as_of) for key in KEYS for as_of in range(-1, 72)]
        assert v.get_many_as_of(lookups) == [model.get(k, t) for k, t in lookups]
        if model.stream_time is not None:
            cutoff = model.stream_time - retention
            for raw_key, raw in raw_entries(store, VERSION_PREFIX).items():
                row = KIND.changelog_row(raw_key, raw)
                expiry = (
                    row["valid_to"]
                    if row["valid_to"] is not None
                    else (row["valid_from"] if row["value"] is None else None)
                )
                assert expiry is None or expiry > cutoff, row
        # A fresh store restored from the changelog rows is the same store.
        fresh = Holder(make("fresh"))
        KIND.restore_entries(fresh.txn, NAME, list(changelog(holder.batches).items()))
        fresh.commit()
        assert raw_entries(fresh.store) == raw_entries(store)
        store.close()
        fresh.store.close()


def _copy(model: Model) -> Model:
    copy = Model(model.retention)
    copy.versions = {k: dict(v) for k, v in model.versions.items()}
    copy.stream_time = model.stream_time
    return copy


@settings(max_examples=300, deadline=None)
@given(retention=st.sampled_from([1, 5, 20]), ops=OPS)
def test_property_memory_store_agrees_with_the_model(retention, ops):
    _check_against_model("memory", retention, ops)


@settings(max_examples=40, deadline=None)
@given(retention=st.sampled_from([1, 5, 20]), ops=OPS)
def test_property_rocksdb_store_agrees_with_the_model(retention, ops):
    _check_against_model("rocksdb", retention, ops)


# -- Materialized.as_versioned and the test driver ------------------------------------------


def test_materialized_as_versioned():
    m = Materialized.as_versioned("tiers", timedelta(minutes=5))
    assert m.store_name == "tiers" and m.is_versioned
    assert m.store_options() == {"history_retention_ms": 300_000}
    assert not Materialized.as_("t").is_versioned and Materialized.as_("t").store_options() == {}
    for bad in (timedelta(0), timedelta(milliseconds=-1), timedelta(microseconds=10), 5000):
        with pytest.raises(TopologyException, match="history retention"):
            Materialized.as_versioned("tiers", bad)
    with pytest.raises(TopologyException):
        Materialized.as_versioned("", timedelta(seconds=1))


@pytest.mark.parametrize("config", [{}, {"lakestate.state.backend": "rocksdb"}])
def test_driver_get_versioned_key_value_store(config):
    b = StreamsBuilder()
    b.table("tiers-in", Materialized.as_versioned("tiers", timedelta(seconds=1)))
    with TopologyTestDriver(b.build(), config) as driver:
        topic = driver.create_input_topic("tiers-in")
        topic.pipe_input(42, "silver", timestamp=1000)
        topic.pipe_input(42, "gold", timestamp=2000)
        topic.pipe_input(42, "bronze", timestamp=500)
        store = driver.get_versioned_key_value_store("tiers")
        assert store.get(42) == VersionedRecord("gold", 2000, None)
        assert store.get(42, 1999) == VersionedRecord("silver", 1000, 2000)
        assert store.get(42, 500) is None  # bronze was beyond retention: not put
        # Writes from the test commit at once; the processor sees them.
        assert store.put(42, "platinum", 1950) == 2000
        assert store.delete(42, 2100) == VersionedRecord("gold", 2000, None)
        topic.pipe_input(42, "late", timestamp=1090)  # 2100 - 1000 = 1100: too late
        topic.pipe_input(42, "early", timestamp=1100)  # at the boundary: put
        assert store.get(42) is None
        assert store.get(42, 2050) == VersionedRecord("gold", 2000, 2100)
        assert store.get(42, 1960) == VersionedRecord("platinum", 1950, 2000)
        assert store.get(42, 1100) == VersionedRecord("early", 1100, 1950)
        assert store.get(42, 1099) is None  # beyond retention
        with pytest.raises(StreamsException, match="not a window store"):
            driver.get_window_store("tiers")
