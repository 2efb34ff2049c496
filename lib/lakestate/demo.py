"""The main job on the embedded defaults: the demo app run through the test driver.

(The Spark + Delta engine and the Airflow DAG take over this command once they land.)
"""

from __future__ import annotations

import json
from pathlib import Path

from lakestate.app import load_module
from lakestate.testing.driver import TopologyTestDriver

DEMO_APP = Path(__file__).resolve().parents[2] / "jobs" / "demo.py"


def run_driver_demo(records: int = 20) -> list[dict]:
    """Pipes ``records`` sample events through the demo app; prints and returns the output."""
    demo = load_module(DEMO_APP)
    app = demo.app
    output = []
    with TopologyTestDriver(app.topology, {"application.id": app.name, **app.config}) as driver:
        events = driver.create_input_topic(demo.INPUT_TOPIC)
        for key, value, timestamp in demo.sample_events(records):
            events.pipe_input(key, value, timestamp=timestamp)
        counts = driver.create_output_topic(demo.OUTPUT_TOPIC)
        for record in counts.read_records_to_list():
            row = {"key": record.key, "value": record.value, "timestamp": record.timestamp}
            output.append(row)
            print(json.dumps(row))
        store = driver.get_key_value_store(demo.STORE)
        print("final counts:", json.dumps(dict(store.all()), sort_keys=True))
    return output
