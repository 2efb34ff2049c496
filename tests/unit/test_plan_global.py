"""The plan of a batch with global tables: every task reads every partition of a global
topic from where its local store stands, before its inputs and within the same budget."""

from lakestate.checkpoint.batch import TaskCheckpoint, global_key, split_global_key
from lakestate.runtime.plan import plan_tasks
from lakestate.task_id import TaskId

T0, T1 = TaskId(0, 0), TaskId(0, 1)
ENDS = {"orders": {0: 5, 1: 3}, "products": {0: 4, 1: 2}}


def test_global_keys():
    assert global_key("products", 2) == "products@2"
    assert split_global_key("products@2", ["products"]) == ("products", 2)
    assert split_global_key("orders", ["products"]) is None
    assert split_global_key("a@b@1", ["products"]) is None


def test_every_task_reads_every_global_partition_from_its_store_first():
    committed = {T0: TaskCheckpoint(2, {"orders": 1}), T1: TaskCheckpoint(1, {"orders": 3})}
    starts = {T0: {"products@0": 4, "products@1": 1}}  # T1's store holds none: from 0
    plans = plan_tasks([T0, T1], {0: ["orders"]}, committed, ENDS, 5, ["products"], starts)
    assert [(p.task, p.batch_id, p.ranges) for p in plans] == [
        (T0, 3, {"products@1": (1, 2), "orders": (1, 5)}),
        (T1, 2, {"products@0": (0, 4), "products@1": (0, 1)}),
    ]
