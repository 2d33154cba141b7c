"""TORCHSTRATA_LOGS / set_logs: names, levels, artifacts, quiet by default, lazy formatting."""

from __future__ import annotations

import logging

import pytest
import torch

from torchstrata.core import (
    ARTIFACTS,
    GraphBuilder,
    GraphPass,
    Level,
    LogsSyntaxError,
    PassManager,
    TensorMeta,
    artifact_logger,
    log_settings,
    prim,
    set_logs,
)
from torchstrata.core.logs import parse_logs, settings_from_environ


@pytest.fixture(autouse=True)
def _quiet_again():
    yield
    set_logs()


def _graph():
    builder = GraphBuilder(Level.PRIMS)
    x = builder.input("x", TensorMeta.from_tensor(torch.zeros(4)))
    doubled = builder.call(prim("mul"), x, 2.0)
    builder.call(prim("neg"), x)  # dead: a pass can drop it
    return builder.build([doubled])


class DropDead(GraphPass):
    name = "drop-dead"

    def __call__(self, graph):
        from torchstrata.core import eliminate_dead_code

        return eliminate_dead_code(graph)


def test_parse_components_levels_and_artifacts():
    levels, artifacts = parse_logs("+capture, -inductor,runtime,guards,+graphs")
    assert levels == {"capture": logging.DEBUG, "inductor": logging.ERROR, "runtime": logging.INFO}
    assert artifacts == {"guards", "graphs"}  # +/- mean nothing for an artifact


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(LogsSyntaxError, match="graph_brakes") as error:
        set_logs("graph_brakes")
    assert all(name in str(error.value) for name in ARTIFACTS)


def test_every_documented_artifact_exists():
    assert set(ARTIFACTS) == {
        "graph_breaks",
        "recompiles",
        "guards",
        "graphs",
        "output_code",
        "passes",
        "perf_hints",
        "cache",
        "dynamic",
    }


def test_environment_parsing():
    settings = settings_from_environ(
        {
            "TORCHSTRATA_LOGS": "recompiles,+runtime",
            "TORCHSTRATA_DEBUG_DIR": "/tmp/d",
            "TORCHSTRATA_PROGRESS": "0",
        }
    )
    assert settings.artifacts == {"recompiles"}
    assert settings.levels == {"runtime": logging.DEBUG}
    assert settings.debug_dir == "/tmp/d" and settings.progress is False
    assert settings_from_environ({}).quiet and settings_from_environ({}).progress is None


def test_passes_artifact_prints_name_time_and_node_counts(capsys):
    set_logs("passes")
    PassManager([DropDead()]).run(_graph(), "post_decomp")
    err = capsys.readouterr().err
    assert "[passes] drop-dead (post_decomp):" in err and "2 -> 1 nodes" in err


def test_quiet_by_default(capsys):
    set_logs()
    PassManager([DropDead()]).run(_graph(), "post_decomp")
    assert capsys.readouterr().err == ""
    assert log_settings().quiet


def test_quiet_leaves_the_application_logging_alone(caplog):
    caplog.set_level(logging.DEBUG, logger="torchstrata.core")
    PassManager([DropDead()]).run(_graph(), "post_decomp")
    assert any("drop-dead" in record.getMessage() for record in caplog.records)


def test_stage_at_debug_shows_its_plain_artifacts_not_the_bulky_ones(capsys):
    set_logs("+core")
    graphs = artifact_logger("torchstrata.core.test_module", "graphs")
    PassManager([DropDead()]).run(_graph(), "post_aot")
    graphs.debug("GRAPH TEXT")
    err = capsys.readouterr().err
    assert "drop-dead" in err and "GRAPH TEXT" not in err
    set_logs("graphs")
    graphs.debug("GRAPH TEXT")
    assert "[graphs] GRAPH TEXT" in capsys.readouterr().err


def test_a_disabled_artifact_formats_nothing(capsys):
    class Expensive:
        def __str__(self) -> str:
            raise AssertionError("formatted although the artifact is off")

    set_logs("passes")  # something else on: the handler is installed
    artifact_logger("torchstrata.core.test_module", "output_code").debug("%s", Expensive())
    assert "[passes]" not in capsys.readouterr().err


def test_component_levels(capsys):
    set_logs("runtime,-capture")
    logging.getLogger("torchstrata.runtime").info("runtime info")
    logging.getLogger("torchstrata.runtime").debug("runtime debug")
    logging.getLogger("torchstrata.capture").warning("capture warning")
    logging.getLogger("torchstrata.capture").error("capture error")
    err = capsys.readouterr().err
    assert "[torchstrata.runtime] runtime info" in err and "runtime debug" not in err
    assert "capture warning" not in err and "[torchstrata.capture] capture error" in err


def test_unknown_artifact_logger_is_an_error():
    with pytest.raises(ValueError, match="unknown log artifact"):
        artifact_logger(__name__, "kernels")


def test_an_unset_environment_leaves_the_application_levels(monkeypatch):
    from torchstrata.core import logs

    set_logs()  # quiet, and nothing applied any more
    runtime = logging.getLogger("torchstrata.runtime")
    monkeypatch.setattr(runtime, "level", logging.DEBUG)
    monkeypatch.setattr(logs, "_configured", False)
    monkeypatch.delenv("TORCHSTRATA_LOGS", raising=False)
    assert logs.from_env().quiet
    assert runtime.level == logging.DEBUG
    monkeypatch.setenv("TORCHSTRATA_LOGS", "runtime")
    monkeypatch.setattr(logs, "_configured", False)
    logs.from_env()
    assert runtime.level == logging.INFO


def test_a_misspelt_environment_name_warns_and_lists_the_known_ones(monkeypatch):
    from torchstrata.core import logs

    monkeypatch.setattr(logs, "_configured", False)
    monkeypatch.setenv("TORCHSTRATA_LOGS", "graph_brakes")
    with pytest.warns(UserWarning, match="TORCHSTRATA_LOGS ignored: unknown log name") as seen:
        assert logs.from_env().quiet
    assert "recompiles" in str(seen[0].message)


def test_help_prints_the_names(monkeypatch, capsys):
    from torchstrata.core import logs

    monkeypatch.setattr(logs, "_configured", False)
    monkeypatch.setenv("TORCHSTRATA_LOGS", "help")
    assert logs.from_env().quiet
    err = capsys.readouterr().err
    assert "TORCHSTRATA_LOGS: a comma-separated list" in err and "output_code" in err


def test_an_explicit_call_wins_over_the_environment(monkeypatch):
    from torchstrata.core import logs

    monkeypatch.setenv("TORCHSTRATA_LOGS", "guards")
    set_logs("passes")
    assert logs.from_env().artifacts == {"passes"}
