"""engine.failure.message_of: the one message a person reads, out of wrapped errors."""

from lakestate.errors import ProcessingException, StreamsException
from lakestate.runtime.failure import message_of

LAKESTATE_LINE = (
    "node KSTREAM-MAPVALUES-0000000001 failed on record (topic 'events' partition 0 "
    "offset 11, key='k2', value={'amount': 13}, timestamp=1011): ValueError: unlucky"
)

# The text of a PythonException from a Spark Python worker (pyspark 4.2), shortened.
WORKER_TRACE = f"""An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/lib/lakestate/processors/task.py", line 294, in process_at
    self._processors[node].process(record)
  File "/tmp/app.py", line 5, in check
    raise ValueError("unlucky")
ValueError: unlucky

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/work/main/lib/lakestate/engine/process.py", line 203, in process_partition
    yield from process_task(records, ctx).to_batches()
lakestate.errors.ProcessingException: {LAKESTATE_LINE}
"""

# A Py4JJavaError's text: the worker's traceback inside a Java stack trace.
JAVA_TRACE = f"""An error occurred while calling o123.toArrow.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 6.0 failed 1 times, most recent failure: Lost task 0.0 (TID 9): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/main/lib/lakestate/engine/process.py", line 203, in process_partition
    yield from process_task(records, ctx).to_batches()
lakestate.errors.ProcessingException: {LAKESTATE_LINE}

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:624)
\tat org.apache.spark.api.python.PythonRunner$$anon$3.read(PythonRunner.scala:960)
"""


def _spark_error(name: str, text: str) -> Exception:
    cls = type(name, (Exception,), {"__module__": "pyspark.errors.exceptions.captured"})
    return cls(text)


def test_lakestate_errors_and_plain_value_errors_keep_their_message():
    assert message_of(ProcessingException("node X failed")) == "node X failed"
    assert message_of(StreamsException("app a: no task 9_9")) == "app a: no task 9_9"
    assert message_of(ValueError("--partitions must be at least 1")) == (
        "--partitions must be at least 1"
    )


def test_other_errors_are_named_with_their_type():
    assert message_of(KeyError("user")) == "KeyError: 'user'"
    assert message_of(FileNotFoundError(2, "No such file", "jobs/x.py")) == (
        "FileNotFoundError: [Errno 2] No such file: 'jobs/x.py'"
    )


def test_the_lakestate_message_out_of_a_worker_traceback():
    assert message_of(_spark_error("PythonException", WORKER_TRACE)) == LAKESTATE_LINE


def test_the_lakestate_message_out_of_a_java_trace():
    assert message_of(_spark_error("Py4JJavaError", JAVA_TRACE)) == LAKESTATE_LINE


def test_a_python_error_without_lakestate_in_a_worker_traceback():
    text = WORKER_TRACE.split("\n\nThe above")[0]  # only the user's error
    assert message_of(_spark_error("PythonException", text)) == "ValueError: unlucky"


def test_a_java_error_without_python():
    text = (
        "An error occurred while calling o45.load.\n"
        ": java.io.FileNotFoundException: /w/topics/x/_delta_log does not exist\n"
        "\tat org.apache.hadoop.fs.RawLocalFileSystem.listStatus(RawLocalFileSystem.java:1)\n"
    )
    assert message_of(_spark_error("Py4JJavaError", text)) == (
        "java.io.FileNotFoundException: /w/topics/x/_delta_log does not exist"
    )


def test_a_spark_analysis_error_gives_its_first_line():
    text = "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found.\n'Project [*]\n"
    assert message_of(_spark_error("AnalysisException", text)) == (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found."
    )
