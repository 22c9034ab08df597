"""Test agent for killing the harness mid-run: it starts a daemon in a session of its own
and an orphan (both ignore SIGTERM), then submits a slightly changed copy of the base model
in the background, so that an evaluation is in flight, and sleeps forever, ignoring SIGTERM
too. ``HOLDOUT_SUBMIT=0`` skips the submission."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(10**6)"
)

signal.signal(signal.SIGTERM, signal.SIG_IGN)
daemon = subprocess.Popen([sys.executable, "-c", IGNORE_TERM], start_new_session=True)
# the orphan: its parent exits at once, so it is reparented away from the agent's tree
subprocess.run(
    [
        sys.executable,
        "-c",
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {IGNORE_TERM!r}])",
    ],
    check=True,
)
print(f"started children (daemon {daemon.pid})", flush=True)


def submit() -> None:
    import torch
    from safetensors.torch import load_file, save_file

    ws = Path(os.environ["WORKSPACE"])
    out = ws / "output" / "v1"
    out.mkdir(parents=True)
    for f in (ws / "models" / "base").iterdir():  # copyfile: not the base's read-only modes
        shutil.copyfile(f, out / f.name)
    weights = load_file(out / "model.safetensors")
    save_file(
        {k: v + 0.002 * torch.randn_like(v) for k, v in weights.items()},
        out / "model.safetensors",
        metadata={"format": "pt"},
    )
    req = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps({"model_path": "output/v1"}).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
            "Content-Type": "application/json",
        },
    )
    print("submitting", flush=True)
    print(urllib.request.urlopen(req, timeout=600).read().decode(), flush=True)


if os.environ.get("HOLDOUT_SUBMIT", "1") != "0":
    threading.Thread(target=submit, daemon=True).start()
while True:
    time.sleep(1000)
