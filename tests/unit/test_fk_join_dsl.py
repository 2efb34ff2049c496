"""Foreign-key table joins (KIP-213) on the test driver: a changed or deleted foreign key
retracts the old result, a foreign row's change reaches its subscribers, and bad
arguments are named. Conformance with Kafka: tests/conformance (join-fk-*)."""

from __future__ import annotations

import lakestate as ls
import pytest
from lakestate.testing import TopologyTestDriver


def _run(left: bool) -> list[tuple]:
    b = ls.StreamsBuilder()
    orders, customers = b.table("orders"), b.table("customers")
    join = orders.left_join if left else orders.join
    join(customers, lambda v: v.split(":")[0] or None, lambda o, c: f"{o}|{c}").to_stream().to(
        "out"
    )
    with TopologyTestDriver(b.build()) as d:
        o, c = d.create_input_topic("orders"), d.create_input_topic("customers")
        out = d.create_output_topic("out")
        c.pipe_input("c1", "alice", 1)
        o.pipe_input("o1", "c1:x", 2)
        c.pipe_input("c2", "bob", 3)
        o.pipe_input("o1", "c2:x", 4)  # another customer
        c.pipe_input("c2", "bobby", 5)  # the foreign row changes
        o.pipe_input("o1", ":x", 6)  # no customer
        o.pipe_input("o2", "c1:y", 7)
        o.pipe_input("o2", None, 8)  # deleted
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_inner_join_follows_and_retracts():
    assert _run(left=False) == [
        ("o1", "c1:x|alice", 2),
        ("o1", "c2:x|bob", 4),
        ("o1", "c2:x|bobby", 5),
        ("o1", None, 6),
        ("o2", "c1:y|alice", 7),
        ("o2", None, 8),
    ]


def test_left_join_keeps_rows_without_a_foreign_row():
    assert _run(left=True) == [
        ("o1", "c1:x|alice", 2),
        ("o1", "c2:x|bob", 4),
        ("o1", "c2:x|bobby", 5),
        ("o1", ":x|None", 6),
        ("o2", "c1:y|alice", 7),
        ("o2", None, 8),
    ]


def test_bad_arguments_are_named():
    b = ls.StreamsBuilder()
    orders, customers = b.table("orders"), b.table("customers")
    with pytest.raises(ls.TopologyException, match="foreign_key_extractor"):
        orders.join(customers, lambda k, v: k, lambda a, c: a)
    with pytest.raises(ls.TopologyException, match="takes \\(other, joiner\\)"):
        orders.join(customers, len, len, len)
