"""Test agent: submits a (changed) model 2 s before the deadline, so its evaluation is still
running when the harness stops the agent. That submission must still count."""

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ws = Path(os.environ["WORKSPACE"])
out = ws / "output" / "v1"
shutil.copytree(ws / "models" / "base", out)
weights = load_file(out / "model.safetensors")
save_file(
    {k: v + 0.01 * torch.randn_like(v) for k, v in weights.items()},
    out / "model.safetensors",
    metadata={"format": "pt"},
)
time.sleep(max(0.0, float(os.environ["DEADLINE"]) - time.time() - 2))
print("submitting", flush=True)
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": "output/v1"}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
        "Content-Type": "application/json",
    },
)
print(urllib.request.urlopen(req, timeout=300).read().decode(), flush=True)
