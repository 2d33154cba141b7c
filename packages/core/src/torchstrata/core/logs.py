"""What torchstrata logs, in the style of ``TORCH_LOGS``: per-stage loggers and artifacts.

Two kinds of names, set together by :func:`set_logs` or the ``TORCHSTRATA_LOGS``
environment variable (a comma-separated list, read by :func:`from_env` only):

* components, one standard-library logger each (``capture`` is
  ``logging.getLogger("torchstrata.capture")``; ``all`` is every one): ``name`` logs at
  INFO, ``+name`` at DEBUG, ``-name`` only errors;
* artifacts (:data:`ARTIFACTS`): one kind of debug output wherever a stage makes it
  (``graph_breaks``, ``recompiles``, ``guards``, ``graphs``, ``output_code``,
  ``passes``, ``perf_hints``, ``cache``), on or off.

A module gets the logger of an artifact with ``artifact_logger(__name__, "guards")``
(named ``<module>.__guards``) and logs at DEBUG. An artifact that is on shows whatever
its stage's level; one that is off shows with its stage at DEBUG (``+capture``) unless it
is one of the bulky ones (``graphs``, ``output_code``), which show only when named.

Quiet by default: until something is switched on, nothing here touches the loggers, so an
application's own ``logging`` configuration applies as for any library. When something
is on, one handler on the ``torchstrata`` logger prints to stderr (the loggers under it
stop propagating to the root logger, so nothing prints twice).

Log calls must cost nothing when off: pass objects as ``%s`` arguments (a graph is
formatted only when the record is emitted) and guard anything expensive to compute by
``logger.isEnabledFor(logging.DEBUG)``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Mapping

import attrs

from torchstrata.core.env_options import (
    DEBUG_DIR_VARIABLE,
    LOGS_VARIABLE,
    PROGRESS_VARIABLE,
    Environment,
)

#: The environment variables :func:`from_env` reads (and nothing else does).
LOGS_ENV = LOGS_VARIABLE
DEBUG_DIR_ENV = DEBUG_DIR_VARIABLE
PROGRESS_ENV = PROGRESS_VARIABLE

ROOT_LOGGER = "torchstrata"
#: Component name -> logger name.
COMPONENTS: Mapping[str, str] = {
    "all": ROOT_LOGGER,
    **{
        stage: f"{ROOT_LOGGER}.{stage}"
        for stage in ("core", "capture", "autograd", "decomp", "inductor", "runtime")
    },
}


@attrs.frozen
class Artifact:
    """One kind of debug output: its name, what it shows, and whether it stays off when its
    stage logs at DEBUG (bulky outputs show only when named)."""

    name: str
    description: str
    off_by_default: bool = False


ARTIFACTS: Mapping[str, Artifact] = {
    a.name: a
    for a in (
        Artifact("graph_breaks", "each graph break: reason, file:line and the source line"),
        Artifact("recompiles", "each recompile of a compiled function, with the guard that failed"),
        Artifact("guards", "the guards of each compiled frame, with the values they check"),
        Artifact(
            "graphs",
            "every graph as it leaves a stage (torch, aten forward/backward, prims), in "
            "core's text form",
            off_by_default=True,
        ),
        Artifact(
            "output_code",
            "generated kernels (C++, Triton) and each graph's launcher",
            off_by_default=True,
        ),
        Artifact("passes", "each graph pass: name, stage, time, node counts before/after"),
        Artifact("perf_hints", "what makes a compiled graph slower than it could be"),
        Artifact("cache", "cache hits, misses and writes"),
        Artifact("dynamic", "symbolic sizes: which dims, why not, lowerings per size"),
    )
}

#: Effectively off: above every level a message is logged at.
_OFF = logging.CRITICAL + 10
_LEVELS = {"": logging.INFO, "+": logging.DEBUG, "-": logging.ERROR}


@attrs.frozen
class LogSettings:
    """What is switched on (the value of :func:`set_logs` and ``TORCHSTRATA_LOGS``).

    * ``levels``: component name -> logging level.
    * ``artifacts``: names of the artifacts that are on.
    * ``debug_dir``: where every compile writes its graphs after every pass, kernels,
      guards and timings (None: nowhere; ``CompileOptions.debug_dir`` wins for a compile).
    * ``progress``: progress on stderr for long compiles and autotuning: None when stderr
      is a terminal, True always, False never.
    """

    levels: Mapping[str, int] = attrs.field(factory=dict)
    artifacts: frozenset[str] = frozenset()
    debug_dir: str | None = None
    progress: bool | None = None

    @property
    def quiet(self) -> bool:
        """Nothing is switched on: the loggers are left as the application set them."""
        return not self.levels and not self.artifacts


class LogsSyntaxError(ValueError):
    """A ``TORCHSTRATA_LOGS`` / :func:`set_logs` name that is neither a component nor an
    artifact; the message lists the valid ones."""


def help_text() -> str:
    """The names ``TORCHSTRATA_LOGS`` accepts, one a line (``TORCHSTRATA_LOGS=help``)."""
    lines = [
        f"{LOGS_ENV}: a comma-separated list of components and artifacts.",
        "components (name: INFO, +name: DEBUG, -name: errors only):",
        *(f"  {name:<12} logger {logger}" for name, logger in COMPONENTS.items()),
        "artifacts (on when named):",
        *(f"  {a.name:<12} {a.description}" for a in ARTIFACTS.values()),
        f"examples: {LOGS_ENV}=graph_breaks,recompiles   {LOGS_ENV}=+inductor,output_code",
    ]
    return "\n".join(lines)


def parse_logs(text: str) -> tuple[dict[str, int], frozenset[str]]:
    """``"+capture,guards"`` -> ({component: level}, {artifact}).

    :raises LogsSyntaxError: an unknown name (the message lists the known ones).
    """
    levels: dict[str, int] = {}
    artifacts: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        prefix = item[0] if item[0] in "+-" else ""
        name = item[len(prefix) :]
        if name in COMPONENTS:
            levels[name] = _LEVELS[prefix]
        elif name in ARTIFACTS:
            artifacts.add(name)  # as in TORCH_LOGS, +/- mean nothing for an artifact
        else:
            raise LogsSyntaxError(f"unknown log name {name!r} in {text!r}\n{help_text()}")
    return levels, frozenset(artifacts)


class _Formatter(logging.Formatter):
    """``[torchstrata.capture] message``; an artifact as ``[graph_breaks] message``."""

    def format(self, record: logging.LogRecord) -> str:
        _, _, artifact = record.name.rpartition(".__")
        record.torchstrata_tag = artifact or record.name
        return super().format(record)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """The stderr handler :func:`set_logs` installs (told apart from the application's)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_Formatter("[%(torchstrata_tag)s] %(message)s"))

    @property
    def stream(self) -> object:
        return sys.stderr  # the current one: tests and tools replace sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


_LOCK = threading.RLock()
_settings = LogSettings()
_configured = False  # set_logs or from_env ran (from_env then reads nothing)
#: Artifact name -> every logger made for it (to switch them together).
_artifact_loggers: dict[str, list[logging.Logger]] = {name: [] for name in ARTIFACTS}
_handler: _Handler | None = None
_applied = False  # levels were set on the loggers (quiet settings then restore them)


def artifact_logger(module: str, artifact: str) -> logging.Logger:
    """The logger through which ``module`` logs ``artifact`` (log at DEBUG).

    :raises ValueError: ``artifact`` is not one of :data:`ARTIFACTS`.
    """
    if artifact not in ARTIFACTS:
        raise ValueError(f"unknown log artifact {artifact!r}; known: {sorted(ARTIFACTS)}")
    logger = logging.getLogger(f"{module}.__{artifact}")
    with _LOCK:
        if logger not in _artifact_loggers[artifact]:
            _artifact_loggers[artifact].append(logger)
            _apply_artifact(logger, artifact, _settings)
    return logger


def _apply_artifact(logger: logging.Logger, artifact: str, settings: LogSettings) -> None:
    if artifact in settings.artifacts:
        logger.setLevel(logging.DEBUG)
    elif ARTIFACTS[artifact].off_by_default:
        logger.setLevel(_OFF)
    else:
        logger.setLevel(logging.NOTSET)  # its stage's level decides


def _apply(settings: LogSettings) -> None:
    global _handler, _applied
    if settings.quiet and not _applied:
        return  # never touched: the application's own configuration stays as it is
    _applied = not settings.quiet
    root = logging.getLogger(ROOT_LOGGER)
    for name, logger_name in COMPONENTS.items():
        if name != "all":
            logging.getLogger(logger_name).setLevel(settings.levels.get(name, logging.NOTSET))
    for artifact, loggers in _artifact_loggers.items():
        for logger in loggers:
            _apply_artifact(logger, artifact, settings)
    if settings.quiet:
        if _handler is not None:
            root.removeHandler(_handler)
            _handler = None
            root.propagate = True
        root.setLevel(logging.NOTSET)
        return
    root.setLevel(settings.levels.get("all", logging.WARNING))
    if _handler is None:
        _handler = _Handler()
        root.addHandler(_handler)
    root.propagate = False


def set_logs(
    logs: str | Iterable[str] | None = None,
    *,
    debug_dir: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
) -> LogSettings:
    """Switch torchstrata's logs: ``set_logs("graph_breaks,recompiles")``,
    ``set_logs(["+inductor", "output_code"])``; ``set_logs()`` makes it quiet again.

    Replaces every earlier setting (``TORCHSTRATA_LOGS`` included: an explicit call wins
    over the environment). ``debug_dir``: every compile from now on dumps its graphs,
    kernels, guards and timings under this directory. ``progress``: see
    :class:`LogSettings`.

    :raises LogsSyntaxError: an unknown name (the message lists the known ones).
    """
    text = logs if isinstance(logs, str) or logs is None else ",".join(logs)
    levels, artifacts = parse_logs(text or "")
    settings = LogSettings(
        levels, artifacts, os.fspath(debug_dir) if debug_dir is not None else None, progress
    )
    global _settings, _configured
    with _LOCK:
        _settings, _configured = settings, True
        _apply(settings)
    return settings


def log_settings() -> LogSettings:
    """The settings in force (after :func:`from_env`, when nothing was set before)."""
    return _settings


def settings_from_environ(environ: Mapping[str, str]) -> LogSettings:
    """The settings that ``TORCHSTRATA_LOGS``, ``TORCHSTRATA_DEBUG_DIR`` and
    ``TORCHSTRATA_PROGRESS`` (``1``/``0``) in ``environ`` ask for.

    :raises LogsSyntaxError: an unknown name in ``TORCHSTRATA_LOGS``.
    """
    levels, artifacts = parse_logs(environ.get(LOGS_ENV, ""))
    progress_text = environ.get(PROGRESS_ENV, "").strip().lower()
    progress = None if not progress_text else progress_text not in ("0", "false", "no", "off")
    return LogSettings(levels, artifacts, environ.get(DEBUG_DIR_ENV) or None, progress)


def from_env() -> LogSettings:
    """Apply ``TORCHSTRATA_LOGS``, ``TORCHSTRATA_DEBUG_DIR`` and ``TORCHSTRATA_PROGRESS``,
    once, unless :func:`set_logs` ran first. The one place that reads them; the runtime
    calls it when ``compile()``, ``explain()`` or the Dynamo backend is first used.

    ``TORCHSTRATA_LOGS=help`` prints the names it accepts; an unknown name is a warning
    that lists them (a typo in a variable must not stop a training run).
    """
    global _settings, _configured
    if _configured:
        return _settings
    with _LOCK:
        if _configured:
            return _settings
        _configured = True
        environ = dict(Environment.from_env().logs)
        if environ.get(LOGS_ENV, "").strip() == "help":
            print(help_text(), file=sys.stderr)
            del environ[LOGS_ENV]
        try:
            settings = settings_from_environ(environ)
        except LogsSyntaxError as error:
            warnings.warn(f"{LOGS_ENV} ignored: {error}", stacklevel=3)
            environ.pop(LOGS_ENV, None)
            settings = settings_from_environ(environ)
        _settings = settings
        _apply(settings)
    return settings
