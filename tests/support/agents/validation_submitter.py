"""Test agent for ``--feedback validation``: submits two changed models without marking
either final, prints the answers, then sleeps until the harness kills it at the deadline.
The run's end must still grade one of them (the best on validation) on the private split."""

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ws = Path(os.environ["WORKSPACE"])
for seed in (1, 2):
    out = ws / "output" / f"v{seed}"
    shutil.copytree(ws / "models" / "base", out)
    weights = load_file(out / "model.safetensors")
    g = torch.Generator().manual_seed(seed)
    save_file(
        {k: v + 0.02 * torch.randn(v.shape, generator=g) for k, v in weights.items()},
        out / "model.safetensors",
        metadata={"format": "pt"},
    )
    req = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps({"model_path": f"output/v{seed}"}).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
            "Content-Type": "application/json",
        },
    )
    print("answer", urllib.request.urlopen(req, timeout=600).read().decode(), flush=True)
print("sleeping until the deadline", flush=True)
time.sleep(3600)
