"""Which agents can run here: installed (binary on PATH or module importable, with its
version, and whether that version is inside the range the adapter was tested with: the
spec's ``tested_versions``) and configured (the real key of its default driver set),
whether a real run of it is known to work yet (``experimental`` specs), and how to install them.
``agent2rl agents`` and ``agent2rl agents doctor`` print :func:`doctor`'s rows
(:meth:`DoctorRow.cells`, columns :data:`DOCTOR_COLUMNS`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from agent2rl.agents.drivers import real_key, resolve_driver
from agent2rl.agents.launch import PROXIED_APIS
from agent2rl.agents.spec import AGENTS, AgentSpec
from agent2rl.errors import UserError

DOCTOR_COLUMNS = (
    "agent", "ready", "installed", "version", "tested versions", "driver", "key", "install",
)  # fmt: skip
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-.+]\w+)*")


@dataclass(frozen=True)
class DoctorRow:
    """One agent's readiness.

    ``location`` is the binary's path or the module's origin (``""`` when not installed);
    ``version`` is ``""`` when unknown or not asked for; ``key_env`` is the variable holding
    the default driver's real key (``""`` for agents without an LLM); ``note`` says what
    else stands in the way (e.g. an API the metering proxy does not relay);
    ``experimental`` is the spec's ``experimental_note`` when the agent is not yet shown
    to complete a real run (``""`` otherwise): it may work, so it does not make ``ok`` false.
    """

    agent: str
    driver: str
    installed: bool
    location: str
    version: str
    key_env: str
    configured: bool
    install: str
    note: str = ""
    experimental: str = ""
    tested_versions: str = ""

    @property
    def version_warning(self) -> str:
        """:func:`version_warning` for this row (``""`` when inside or unknown)."""
        return version_warning(self.agent, self.version, self.tested_versions)

    @property
    def ok(self) -> bool:
        """Ready to run with its default driver."""
        return self.installed and self.configured and not self.note

    def readiness(self) -> str:
        """The "ready" cell: ``yes`` / ``no``; an experimental agent shows its note instead of
        ``yes`` (``experimental: NOTE``) and after ``no`` (``no; experimental: NOTE``), so
        the note is visible whether or not the agent is installed."""
        if not self.experimental:
            return "yes" if self.ok else "no"
        flag = f"experimental: {self.experimental}"
        return flag if self.ok else f"no; {flag}"

    def cells(self) -> tuple[str, ...]:
        """The row as text for :data:`DOCTOR_COLUMNS`."""
        key = "not needed"
        if self.key_env:
            key = f"{self.key_env} {'set' if self.configured else 'missing'}"
        if self.note:
            key = f"{key}; {self.note}"
        version = self.version or "-"
        if self.version_warning:
            version = f"{version} (UNTESTED: outside {self.tested_versions})"
        return (
            self.agent,
            self.readiness(),
            "yes" if self.installed else "no",
            version,
            self.tested_versions or "-",
            self.driver or "-",
            key,
            "" if self.installed else self.install,
        )


def _locate(spec: AgentSpec, path: str | None) -> str:
    if spec.binary:
        return shutil.which(spec.binary, path=path) or ""
    if spec.module:
        try:
            found = importlib.util.find_spec(spec.module)
        except (ImportError, ValueError):
            found = None
        return str(found.origin or spec.module) if found else ""
    # No binary or module: the agent ships with agent2rl (reference and test agents).
    return "built in"


#: A pip/uv console script: ``#!<python>`` then ``from <package>.<module> import <main>``.
_CONSOLE_SCRIPT = re.compile(
    r"\A#!(\S*python[\d.]*)\s.*?^from ([A-Za-z_]\w*)[.\w]* import ", re.M | re.S
)
_DIST_VERSION = (
    "import importlib.metadata as m, sys\n"
    "d = m.packages_distributions().get(sys.argv[1], [])\n"
    "print(m.version(d[0]) if d else '')"
)


def _version_from(argv: list[str], env: Mapping[str, str], timeout_s: float) -> str:
    """The first version number ``argv`` prints (stdout, else stderr), or "" (it cannot
    start, times out or prints none)."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    match = _VERSION.search(done.stdout or "") or _VERSION.search(done.stderr or "")
    return match.group(0) if match else ""


def _installed_version(
    spec: AgentSpec, location: str, env: Mapping[str, str], timeout_s: float
) -> str:
    """The version of the CLI found at ``location``; "" when not installed or not asked. A
    Python console script's is read from its interpreter's package metadata: asking such a
    CLI for ``--version`` imports all of it (OpenHands: 10-28 s on a loaded 2-core machine,
    past the timeout), the metadata answers in about a second."""
    if not (location and spec.binary and spec.version_args):
        return ""
    try:
        with open(location, "rb") as f:
            head = f.read(2048).decode("utf-8", "replace")
    except OSError:
        head = ""
    if script := _CONSOLE_SCRIPT.match(head):
        python, package = script.groups()
        if version := _version_from([python, "-c", _DIST_VERSION, package], env, timeout_s):
            return version
    return _version_from([location, *spec.version_args], env, timeout_s)


def in_tested_range(version: str, tested: str) -> bool | None:
    """Whether ``version`` (as a CLI prints it, e.g. ``0.169.0``) is inside the PEP 440 range
    ``tested``; None when either is empty or unreadable (nothing to compare). Pre-releases
    inside the range count as inside."""
    if not version or not tested:
        return None
    try:
        return SpecifierSet(tested).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def version_warning(agent: str, version: str, tested: str) -> str:
    """One line warning that ``agent``'s installed ``version`` is outside the ``tested``
    range (its flags or log events may have changed), or ``""``: inside, or unknown."""
    if in_tested_range(version, tested) is not False:
        return ""
    return (
        f"{agent} {version} is outside the versions its adapter was tested with ({tested}): "
        "a changed flag or log event may fail the run or its report"
    )


def cli_version_record(
    spec: AgentSpec, environ: Mapping[str, str] | None = None, *, timeout_s: float = 10.0
) -> dict[str, object]:
    """What a run records about the CLI it ran: ``{"version", "tested_versions",
    "in_tested_range", "warning"}`` (``version`` ``""`` when unknown: not installed, no
    ``version_args``, or no version in its answer; ``in_tested_range`` None then). Runs
    ``binary --version`` at most ``timeout_s``; never raises."""
    row = check_agent(spec, environ, timeout_s=timeout_s)
    return {
        "version": row.version,
        "tested_versions": row.tested_versions,
        "in_tested_range": in_tested_range(row.version, row.tested_versions),
        "warning": row.version_warning,
    }


def check_agent(
    spec: AgentSpec,
    environ: Mapping[str, str] | None = None,
    *,
    versions: bool = True,
    timeout_s: float = 10.0,
) -> DoctorRow:
    """One agent's :class:`DoctorRow`. ``environ`` (default ``os.environ``) supplies PATH and
    the keys; the version is asked (``binary --version``, at most ``timeout_s``) only when
    ``versions`` and the spec has ``version_args``. Never raises for a broken install."""
    env = os.environ if environ is None else environ
    location = _locate(spec, env.get("PATH"))
    key_env, configured, note = "", True, ""
    if spec.uses_llm:
        try:
            driver = resolve_driver(spec.default_driver)
            key_env = driver.key_env
            real_key(driver, env)
        except UserError as err:
            # an unknown driver (its error is the note), or its key missing (key_env set)
            configured = False
            note = "" if key_env else str(err)
        if key_env and driver.api not in PROXIED_APIS:
            note = f"the metering proxy does not relay the {driver.api} API yet"
    return DoctorRow(
        agent=spec.name,
        driver=spec.default_driver,
        installed=bool(location),
        location=location,
        version=_installed_version(spec, location, env, timeout_s) if versions else "",
        key_env=key_env,
        configured=configured,
        install=spec.install,
        note=note,
        experimental=spec.experimental_note if spec.experimental else "",
        tested_versions=spec.tested_versions,
    )


def doctor(
    specs: Iterable[AgentSpec] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    versions: bool = True,
    timeout_s: float = 10.0,
) -> list[DoctorRow]:
    """A :class:`DoctorRow` per agent (default: every built-in), in the given order.
    Version probes run concurrently, so the whole check takes about the slowest CLI's
    startup time, at most ``timeout_s``."""
    items = list(AGENTS.values() if specs is None else specs)
    check = partial(check_agent, environ=environ, versions=versions, timeout_s=timeout_s)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        return list(pool.map(check, items))
