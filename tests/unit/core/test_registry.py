"""The generic registry (agent2rl.registry) and the registries built on it: a name conflict is
refused with a clear error, an unknown name suggests the close one, and an installed
distribution's entry point adds a task, a backend and a log parser. The entry points are
real: a ``*.dist-info`` directory (METADATA + entry_points.txt) and a module on ``sys.path``,
read by ``importlib.metadata`` as it reads any installed package."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent2rl.errors import UserError
from agent2rl.registry import Registry, RegistryConflict, UnknownName


def _alpha() -> str:
    return "alpha"


def _beta() -> str:
    return "beta"


def test_a_conflicting_name_is_refused_naming_both() -> None:
    reg: Registry[object] = Registry("widgets", "widget")
    reg.register("alpha", _alpha)
    with pytest.raises(RegistryConflict) as err:
        reg.register("alpha", _beta)
    msg = str(err.value)
    assert "widget 'alpha' is already registered" in msg
    assert "_alpha" in msg and "_beta" in msg  # both objects, by qualified name
    assert isinstance(err.value, UserError)  # the CLI prints it as one line
    assert reg["alpha"] is _alpha  # the first one stays


def test_registering_the_same_object_again_is_a_no_op() -> None:
    reg: Registry[object] = Registry("widgets")
    reg.register("alpha", _alpha)
    reg.register("alpha", _alpha)
    assert reg.names() == ["alpha"] and len(reg) == 1


def test_an_unknown_name_suggests_the_close_one_and_lists_all() -> None:
    reg: Registry[object] = Registry("widgets", "widget")
    reg.register("alpha", _alpha)
    reg.register("beta", _beta)
    with pytest.raises(UnknownName) as err:
        reg["alpah"]
    assert str(err.value) == (
        "unknown widget 'alpah': did you mean 'alpha'? choose one of alpha, beta"
    )
    assert isinstance(err.value, KeyError) and isinstance(err.value, UserError)
    with pytest.raises(UnknownName, match=r"^unknown widget 'zzz': choose one of alpha, beta$"):
        reg.lookup("zzz")
    # read like a dict: get with a default, in, iteration in registration order
    assert reg.get("zzz") is None and reg.get("zzz", _beta) is _beta
    assert "alpha" in reg and "zzz" not in reg
    assert list(reg) == ["alpha", "beta"] and dict(reg.items()) == {"alpha": _alpha, "beta": _beta}


def test_the_task_registry_refuses_a_second_task_under_a_taken_name() -> None:
    from agent2rl.tasks import get_task, register
    from agent2rl.tasks.arith_lite import ArithLite

    class Impostor(ArithLite):
        pass

    with pytest.raises(RegistryConflict, match="task 'arith-lite' is already registered"):
        register("arith-lite", Impostor)
    register("arith-lite", ArithLite)  # the same class: fine
    assert type(get_task("arith-lite")) is ArithLite
    with pytest.raises(UserError, match="did you mean 'arith-lite'"):
        get_task("arith-lit")


def _install(root: Path, dist: str, module: str, source: str, entry_points: str) -> None:
    """A minimal installed distribution under ``root``: its module and its dist-info."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))  # also invalidates the import caches
    yield tmp_path


def test_an_entry_point_adds_a_task(plugin_path: Path) -> None:
    from agent2rl.tasks import TASKS, get_task, task_names

    _install(
        plugin_path,
        "a2r-plugin-tasks",
        "a2r_plugin_tasks",
        """
        from agent2rl.tasks import task
        from agent2rl.tasks.arith_lite import ArithLite

        @task
        class PluginArith(ArithLite):
            name = "plugin-arith"

        class Factory(ArithLite):
            name = "plugin-factory"
        """,
        """
        [agent2rl.tasks]
        plugin-arith = a2r_plugin_tasks
        plugin-factory = a2r_plugin_tasks:Factory
        """,
    )
    try:
        TASKS.reload_entry_points()
        assert {"plugin-arith", "plugin-factory"} <= set(task_names())
        assert get_task("plugin-arith").name == "plugin-arith"  # the module registered it
        assert get_task("plugin-factory").name == "plugin-factory"  # the entry named it
    finally:
        TASKS.unregister("plugin-arith")
        TASKS.unregister("plugin-factory")


def test_an_entry_point_adds_a_backend(plugin_path: Path, tmp_path: Path) -> None:
    from agent2rl.inference.backend import (
        BACKENDS,
        BackendConfig,
        GenerationSettings,
        load_backend,
    )

    _install(
        plugin_path,
        "a2r-plugin-backend",
        "a2r_plugin_backend",
        """
        class EchoBackend:
            name = "echo"

            def __init__(self, model_dir, config):
                self.model_dir = model_dir

            def generate(self, prompts, settings):
                return [p.upper() for p in prompts]

            def chat_prompt(self, messages):
                return None

            def describe(self):
                return {"backend": "echo"}

            def close(self):
                pass
        """,
        """
        [agent2rl.backends]
        echo = a2r_plugin_backend:EchoBackend
        """,
    )
    try:
        BACKENDS.reload_entry_points()
        backend = load_backend(tmp_path, BackendConfig(kind="echo"))
        assert backend.generate(["hi"], GenerationSettings()) == ["HI"]
        with pytest.raises(UserError, match="unknown backend 'ecko': use one of auto, .*echo"):
            BackendConfig(kind="ecko").validate()
    finally:
        BACKENDS.unregister("echo")


def test_an_entry_point_adds_a_log_parser_an_agent_spec_can_name(
    plugin_path: Path, tmp_path: Path
) -> None:
    from agent2rl.agents.logs import PARSERS, parse_log
    from agent2rl.agents.spec import load_spec

    _install(
        plugin_path,
        "a2r-plugin-logs",
        "a2r_plugin_logs",
        """
        from agent2rl.agents.logs.base import Event

        LOG_FORMAT = "shout"

        def parse(text):
            return [Event("final", text=text.strip().upper())]
        """,
        """
        [agent2rl.log_parsers]
        shout = a2r_plugin_logs
        """,
    )
    spec_file = tmp_path / "shouter.toml"
    spec_file.write_text(
        'name = "shouter"\ndescription = "d"\nkind = "custom"\n'
        'command = ["true"]\nlog_format = "shout"\n'
    )
    try:
        PARSERS.reload_entry_points()
        assert [e.text for e in parse_log("done\n", "shout")] == ["DONE"]
        assert load_spec(spec_file).log_format == "shout"
    finally:
        PARSERS.unregister("shout")


def test_a_broken_entry_point_is_one_clear_error(plugin_path: Path) -> None:
    reg: Registry[object] = Registry("test_broken", "thing")
    _install(
        plugin_path,
        "a2r-plugin-broken",
        "a2r_plugin_broken",
        "raise RuntimeError('boom')\n",
        "[agent2rl.test_broken]\nthing = a2r_plugin_broken:X\n",
    )
    with pytest.raises(UserError, match=r"a2r-plugin-broken .*failed to load: RuntimeError: boom"):
        reg.names()
