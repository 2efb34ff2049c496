"""The KIP-441 task assignor: ``assign(tasks, clients, previous, config) -> Assignment``."""

from lakestate.assign.assignor import assign
from lakestate.assign.types import Assignment, AssignorConfig, ClientState

__all__ = ["assign", "Assignment", "AssignorConfig", "ClientState"]
