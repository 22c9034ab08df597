"""The bubblewrap sandbox, exercised with real bwrap, a real interpreter and a real HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_argv, bwrap_available, python_ro_binds

needs_bwrap = pytest.mark.skipif(
    not bwrap_available(),
    reason="bwrap is not on PATH or cannot create namespaces here (e.g. an unprivileged container)",
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    ws = run / "workspace"
    (ws / "code").mkdir(parents=True)
    (ws / "data").mkdir()
    (ws / "data" / "train.jsonl").write_text('{"q": 1}\n')
    (ws / "models" / "base").mkdir(parents=True)
    (run / "secret.txt").write_text("private split")
    return run


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A read-only bind holding a package that must be hidden and a file that must not."""
    store = tmp_path / "store"
    (store / "pkg").mkdir(parents=True)
    (store / "pkg" / "grader_secret.py").write_text("KEY = 1\n")
    (store / "visible.txt").write_text("ok")
    return store


def _spec(run_dir: Path, store: Path) -> SandboxSpec:
    ws = run_dir / "workspace"
    return SandboxSpec(
        workspace=ws,
        ro_binds=[*python_ro_binds(), store],
        ro_inside=[ws / "data", ws / "models"],
        hide=[store / "pkg"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(ws), "AGENT2RL_VISIBLE": "yes"},
    )


@pytest.fixture
def http_url() -> Iterator[str]:
    class Pong(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"pong"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pong)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ping"
    finally:
        server.shutdown()
        server.server_close()


# Runs inside the sandbox; each probe reports what happened instead of raising.
_PROBE = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    run, ws, store, url, test_file = sys.argv[1:6]
    out = {}

    def attempt(name, fn):
        try:
            out[name] = ["ok", fn()]
        except Exception as exc:
            out[name] = ["error", type(exc).__name__]

    def write(path):
        with open(path, "w") as fh:
            fh.write("x")
        return True

    attempt("read_secret", lambda: open(os.path.join(run, "secret.txt")).read())
    attempt("list_run", lambda: sorted(os.listdir(run)))
    attempt("write_code", lambda: write(os.path.join(ws, "code", "x")))
    attempt("write_data", lambda: write(os.path.join(ws, "data", "y")))
    attempt("write_models", lambda: write(os.path.join(ws, "models", "base", "z")))
    attempt("write_usr", lambda: write("/usr/agent2rl-sandbox-test"))
    attempt("read_data", lambda: open(os.path.join(ws, "data", "train.jsonl")).read())
    attempt("list_hidden", lambda: os.listdir(os.path.join(store, "pkg")))
    attempt("write_hidden", lambda: write(os.path.join(store, "pkg", "planted.py")))
    attempt("read_visible", lambda: open(os.path.join(store, "visible.txt")).read())
    attempt("read_test_file", lambda: open(test_file).read())
    attempt("resolv_conf", lambda: os.path.exists("/etc/resolv.conf"))
    attempt("http", lambda: urllib.request.urlopen(url, timeout=10).read().decode())
    out["env"] = dict(os.environ)
    out["cwd"] = os.getcwd()
    out["pid"] = os.getpid()
    print(json.dumps(out))
    """
)


@needs_bwrap
def test_sandbox_isolation(
    run_dir: Path, store: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT2RL_TEST_LEAK", "must-not-leak")
    ws = run_dir / "workspace"
    args = [str(run_dir), str(ws), str(store), http_url, str(Path(__file__).resolve())]
    argv = bwrap_argv(_spec(run_dir, store), [sys.executable, "-c", _PROBE, *args])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)

    assert out["read_secret"][0] == "error"
    assert out["list_run"][0] == "error" or "secret.txt" not in out["list_run"][1]
    assert out["write_code"] == ["ok", True]
    assert (ws / "code" / "x").read_text() == "x"
    assert out["write_data"][0] == "error"
    assert out["write_models"][0] == "error"
    assert out["write_usr"][0] == "error"
    assert out["read_data"] == ["ok", '{"q": 1}\n']
    assert out["list_hidden"] == ["ok", []]
    assert out["write_hidden"][0] == "error"
    assert out["read_visible"] == ["ok", "ok"]
    assert out["read_test_file"][0] == "error"  # the host repo is not mounted
    assert out["resolv_conf"] == ["ok", True]
    assert out["http"] == ["ok", "pong"]
    assert "AGENT2RL_TEST_LEAK" not in out["env"]
    assert out["env"]["AGENT2RL_VISIBLE"] == "yes"
    assert out["cwd"] == str(ws)
    assert out["pid"] < 10  # a fresh pid namespace
    assert not (ws / "data" / "y").exists()


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in (p.info["cmdline"] or []):
            found.append(p)
    return found


@needs_bwrap
def test_killing_bwrap_kills_the_sandboxed_tree(run_dir: Path, store: Path) -> None:
    marker = f"300.{uuid.uuid4().int % 10**9}"  # a unique, valid sleep duration
    script = f"sleep {marker} & sleep {marker}"
    argv = bwrap_argv(_spec(run_dir, store), ["bash", "-c", script])
    bwrap = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_marked(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_marked(marker)) == 2
        # --new-session puts the sandboxed tree in another session: killing bwrap's group
        # reaches only bwrap, and the sleeps must die with it (pid namespace + die-with-parent).
        os.killpg(bwrap.pid, signal.SIGKILL)
        bwrap.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _marked(marker) == []
    finally:
        for p in _marked(marker):
            p.kill()
        if bwrap.poll() is None:
            bwrap.kill()


def test_bwrap_argv_shape(run_dir: Path, store: Path) -> None:
    spec = _spec(run_dir, store)
    argv = bwrap_argv(spec, ["python", "-V"])
    assert argv[-3:] == ["--", "python", "-V"]
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in argv
    assert "--new-session" in argv and "--clearenv" in argv
    assert "--unshare-net" not in argv and "--unshare-all" not in argv
    ws = str(spec.workspace)
    # The read-only rebinds of data/ must come after the read-write workspace bind.
    assert argv.index("--bind") < argv.index(str(spec.workspace / "data"))
    assert argv[argv.index("--chdir") + 1] == ws


def test_bwrap_argv_rejects_bad_paths(run_dir: Path, store: Path, tmp_path: Path) -> None:
    spec = _spec(run_dir, store)
    spec.ro_binds.append(tmp_path / "missing")
    with pytest.raises(ValueError, match="missing"):
        bwrap_argv(spec, ["true"])
    spec = _spec(run_dir, store)
    spec.ro_inside.append(store)
    with pytest.raises(ValueError, match="not inside the workspace"):
        bwrap_argv(spec, ["true"])
    # A hide path that does not exist has nothing to hide: skipped.
    spec = _spec(run_dir, store)
    spec.hide.append(tmp_path / "nothing-here")
    assert str(tmp_path / "nothing-here") not in bwrap_argv(spec, ["true"])


def test_python_ro_binds_are_outermost_and_cover_the_interpreter() -> None:
    binds = python_ro_binds()
    assert binds
    for a in binds:
        assert a.is_absolute() and a.exists()
        assert not any(a != b and a.is_relative_to(b) for b in binds)
    covered = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve()]
    for path in covered:
        assert any(path.is_relative_to(b) for b in binds), path


def test_devices_are_passed_through_with_sys(tmp_path: Path) -> None:
    from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_argv

    ws = tmp_path / "ws"
    ws.mkdir()
    argv = bwrap_argv(SandboxSpec(workspace=ws, devices=[Path("/dev/null")]), ["true"])
    i = argv.index("--dev-bind")
    assert argv[i + 1 : i + 3] == ["/dev/null", "/dev/null"]
    assert ["--ro-bind", "/sys", "/sys"] == argv[argv.index("/sys") - 1 : argv.index("/sys") + 2]
    plain = bwrap_argv(SandboxSpec(workspace=ws), ["true"])
    assert "--dev-bind" not in plain and "/sys" not in plain
