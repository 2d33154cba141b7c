"""Progress on stderr: plain lines, off when stderr is not a terminal unless asked."""

from __future__ import annotations

import sys
import types

import pytest

from torchstrata.core import progress, set_logs
from torchstrata.core.progress_report import progress_enabled


@pytest.fixture(autouse=True)
def _quiet_again():
    yield
    set_logs()


def test_plain_lines_when_asked(capsys):
    with progress("compiling f", total=3, delay=0, enabled=True, style="plain") as report:
        report.step("capture")
    err = capsys.readouterr().err
    assert "torchstrata: compiling f [0/3]: starting" in err
    assert "torchstrata: compiling f: done in" in err


def test_off_when_stderr_is_not_a_terminal(capsys):
    assert not sys.stderr.isatty()  # captured by pytest
    assert progress_enabled() is False
    with progress("compiling f", delay=0) as report:
        report.step("capture")
    assert capsys.readouterr().err == ""


def test_the_logs_setting_turns_it_on_and_off(capsys):
    set_logs(progress=True)
    assert progress_enabled()
    with progress("autotuning k", delay=0, style="plain"):
        pass
    assert "autotuning k" in capsys.readouterr().err
    set_logs(progress=False)
    assert not progress_enabled()


def test_quick_work_shows_nothing(capsys):
    with progress("compiling f", delay=60.0, enabled=True, style="plain") as report:
        report.step("capture")
    assert capsys.readouterr().err == ""


def test_unknown_style_is_an_error():
    with pytest.raises(ValueError, match="progress style"), progress("x", enabled=True, style="x"):
        pass


def test_tqdm_is_used_when_installed(monkeypatch, capsys):
    made = []

    class FakeTqdm:
        def __init__(self, total, desc, file, leave):
            self.desc, self.total, self.n, self.postfix = desc, total, 0, ""
            made.append(self)

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

    fake = types.ModuleType("tqdm")
    fake.tqdm = FakeTqdm  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tqdm", fake)
    with progress("autotuning k", total=2, delay=0, enabled=True, style="tqdm") as report:
        report.step("config 1")
        report.step("config 2")
    (bar,) = made
    assert bar.desc == "torchstrata: autotuning k" and bar.n == 2 and bar.postfix == "config 2"
    assert bar.closed and "autotuning k: done in" in capsys.readouterr().err


def test_rich_is_preferred_when_installed(monkeypatch, capsys):
    calls = []

    class FakeConsole:
        def __init__(self, file):
            self.file = file

        def print(self, text):
            calls.append(("print", text))

    class FakeProgress:
        def __init__(self, *columns, console, transient):
            assert transient and console.file is sys.stderr

        def start(self):
            calls.append(("start",))

        def add_task(self, description, total):
            calls.append(("task", description, total))
            return 7

        def update(self, task, description, completed):
            calls.append(("update", task, description, completed))

        def stop(self):
            calls.append(("stop",))

    console = types.ModuleType("rich.console")
    console.Console = FakeConsole  # type: ignore[attr-defined]
    rich_progress = types.ModuleType("rich.progress")
    rich_progress.Progress = FakeProgress  # type: ignore[attr-defined]
    for column in ("SpinnerColumn", "TextColumn", "TimeElapsedColumn"):
        setattr(rich_progress, column, lambda *args: None)
    monkeypatch.setitem(sys.modules, "rich", types.ModuleType("rich"))
    monkeypatch.setitem(sys.modules, "rich.console", console)
    monkeypatch.setitem(sys.modules, "rich.progress", rich_progress)
    with progress("compiling f", total=2, delay=0, enabled=True, style="rich") as report:
        report.step("capture")
    assert calls[:3] == [
        ("start",),
        ("task", "compiling f", 2),
        ("update", 7, "compiling f: starting", 0),
    ]
    assert calls[3] == ("update", 7, "compiling f: capture", 1)
    assert calls[4] == ("stop",) and calls[5][1].startswith("torchstrata: compiling f: done in")
