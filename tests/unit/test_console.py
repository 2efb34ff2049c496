"""lakestate.console: bars only when enabled, nested bars share one display, echo."""

import io

import pytest
from lakestate import console


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _off():
    console.disable()
    yield
    console.disable()


def test_disabled_progress_is_a_no_op(capsys):
    assert not console.enabled()
    with console.progress("restore", total=10) as bar:
        bar.advance(3)
        bar.update(total=20)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert console._display is None


def test_enabled_bars_draw_on_the_stream_and_nest():
    stream = _Tty()
    console.enable(stream)
    with console.progress("batches", total=2) as outer:
        with console.progress("records of batch 1", total=100) as inner:
            inner.advance(40)
            display = console._display
            assert display is not None
            tasks = {t.description: t for t in display.tasks}
            assert tasks["records of batch 1"].completed == 40
            assert tasks["batches"].total == 2
        outer.advance()
        assert [t.description for t in display.tasks] == ["batches"]
        assert display.tasks[0].completed == 1
    assert console._display is None  # the last bar closed the display
    assert "batches" in stream.getvalue()


def test_echo_prints_to_the_file_with_or_without_a_bar():
    out = io.StringIO()
    console.echo("before", out)
    console.enable(_Tty())
    with console.progress("work", total=None):
        console.echo("during", out)  # not a terminal: written as is
    assert out.getvalue() == "before\nduring\n"
