"""Test app: counts.py with its stores in the driver's state directory when it runs through
Spark (``lakestate.spark.state.owner=driver``: Spark reads and routes the input, the
Python workers open the driver's stores, the output comes back to the driver), the path an
app with global tables takes on a local master."""

import dataclasses
import runpy
from pathlib import Path

_app = runpy.run_path(str(Path(__file__).with_name("counts.py")))["app"]
app = dataclasses.replace(_app, config={**_app.config, "lakestate.spark.state.owner": "driver"})
