"""Test utilities: the TopologyTestDriver."""

from lakestate.testing.driver import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"]
