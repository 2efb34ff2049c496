"""``split()``: Named, Branched and BranchedKStream, as Kafka Streams' (KIP-418).

``stream.split(Named.as_("p-"))`` adds a branch node named ``p-`` (else a generated
``KSTREAM-BRANCH-<n>``). Each ``branch(predicate, Branched.as_(name))`` adds a child named
prefix + name, or prefix + its position (1, 2, ...) without a name; ``default_branch()``'s
child is prefix + name or prefix + "0". A record goes to the first branch whose predicate
holds, else to the default branch, else nowhere. ``default_branch()`` and
``no_default_branch()`` return the branches as a dict: child name -> KStream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.errors import TopologyException
from lakestate.processors.stateless import Branch, PassThrough

if TYPE_CHECKING:
    from lakestate.dsl.kstream import KStream

MAX_NAME_LENGTH = 249  # Kafka's Named


def check_name(name: Any, what: str) -> str:
    """``name`` if Kafka's ``Named`` allows it (it may name a topic): ASCII alphanumerics,
    '.', '_' and '-', at most 249 characters, not "." or ".."; else a TopologyException."""
    if not isinstance(name, str) or not name:
        raise TopologyException(f"{what} needs a non-empty name, got {name!r}")
    if name in (".", ".."):
        raise TopologyException(f"{what}: name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise TopologyException(
            f"{what}: name {name[:40]!r}... is longer than {MAX_NAME_LENGTH} characters"
        )
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
    if bad:
        raise TopologyException(
            f"{what}: name {name!r} contains {''.join(bad)!r}; use ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return name


@dataclass(frozen=True)
class Named:
    """Names a processor node: ``Named.as_("orders-")`` (for ``split``, the prefix of its
    branches' names; for ``merge``, the merge node's name)."""

    name: str

    @staticmethod
    def as_(name: str) -> Named:
        return Named(check_name(name, "Named.as_"))

    def with_name(self, name: str) -> Named:
        return Named.as_(name)


@dataclass(frozen=True)
class Branched:
    """How one branch of ``split()`` is named and used. ``as_(name)``: the branch's KStream
    is in the result under prefix + name. ``with_function(fn)``: ``fn(branch)`` goes in the
    result instead (left out when it returns None). ``with_consumer(fn)``: ``fn(branch)`` is
    called and the branch left out of the result."""

    name: str | None = None
    function: Callable[[KStream], KStream | None] | None = None
    consumer: Callable[[KStream], None] | None = None

    @staticmethod
    def as_(name: str) -> Branched:
        return Branched(check_name(name, "Branched.as_"))

    @staticmethod
    def with_function(
        function: Callable[[KStream], KStream | None], name: str | None = None
    ) -> Branched:
        if not callable(function):
            raise TopologyException(f"Branched.with_function needs a callable, got {function!r}")
        return Branched(_optional_name(name, "Branched.with_function"), function=function)

    @staticmethod
    def with_consumer(consumer: Callable[[KStream], None], name: str | None = None) -> Branched:
        if not callable(consumer):
            raise TopologyException(f"Branched.with_consumer needs a callable, got {consumer!r}")
        return Branched(_optional_name(name, "Branched.with_consumer"), consumer=consumer)


def _optional_name(name: Any, what: str) -> str | None:
    return None if name is None else check_name(name, what)


class BranchedKStream:
    """What ``KStream.split()`` returns: add branches, then end with ``default_branch()`` or
    ``no_default_branch()``, which return the dict of branch name -> KStream."""

    def __init__(self, stream: KStream, named: Named | None) -> None:
        if named is not None and not isinstance(named, Named):
            raise TopologyException(f"split() takes a Named, got {named!r}")
        self._stream = stream
        graph = stream._graph
        self._graph = graph
        self._name = graph.new_name("KSTREAM-BRANCH-") if named is None else named.name
        self._predicates: list[Callable[[Any, Any], bool]] = []
        self._children: list[str] = []
        self._result: dict[str, KStream] = {}
        self._ended = False
        graph.add_processor(self._name, stream.node_name, self._factory())

    def _factory(self) -> Callable[[], Branch]:
        # Bound now: branches added later must not change a topology already built.
        return partial(Branch, tuple(self._predicates), tuple(self._children))

    def branch(
        self, predicate: Callable[[Any, Any], bool], branched: Branched | None = None
    ) -> BranchedKStream:
        """A branch for the records that no earlier branch took and ``predicate(key,
        value)`` holds for."""
        self._check_open("branch")
        check_function(predicate, self._name, "BranchedKStream.branch", "predicate(key, value)")
        self._predicates.append(predicate)
        self._add(branched, len(self._predicates))
        return self

    def default_branch(self, branched: Branched | None = None) -> dict[str, KStream]:
        """The branch for records no predicate took; ends the split."""
        self._check_open("default_branch")
        self._add(branched, 0)
        self._ended = True
        return dict(self._result)

    def no_default_branch(self) -> dict[str, KStream]:
        """Ends the split: records no predicate took are dropped."""
        self._check_open("no_default_branch")
        self._ended = True
        return dict(self._result)

    def _check_open(self, what: str) -> None:
        if self._ended:
            raise TopologyException(
                f"node {self._name}: {what}() after default_branch() or no_default_branch(), "
                "which end the split; add every branch before them"
            )

    def _add(self, branched: Branched | None, index: int) -> None:
        from lakestate.dsl.kstream import KStream

        if branched is None:
            branched = Branched()
        if not isinstance(branched, Branched):
            raise TopologyException(f"node {self._name}: expected a Branched, got {branched!r}")
        child = self._name + (str(index) if branched.name is None else branched.name)
        graph = self._graph
        graph.new_name("KSTREAM-BRANCHCHILD-")  # Kafka spends a node number on each branch
        graph.add_processor(child, self._name, PassThrough)
        self._children.append(child)
        graph.nodes[self._name].factory = self._factory()
        stream = KStream(graph, child, self._stream._repartition_required, self._stream.serdes)
        if branched.function is not None:
            result = branched.function(stream)
            if result is not None:
                self._result[child] = result
        elif branched.consumer is not None:
            branched.consumer(stream)
        else:
            self._result[child] = stream
