"""Resolve ``--model``: the built-in ``tiny``, a local HF directory, or a hub id."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.locks import file_lock
from agent2rl.models.tiny import TINY_VERSION, build_tiny
from agent2rl.models.weights import model_fingerprint, weights_hash

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What a base model needs; pickle weights and custom code are never fetched.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


@dataclass(frozen=True)
class ModelRef:
    """A resolved base model: its name as given, its directory, its weights hash and its
    fingerprint (weights + config + tokenizer, see :func:`model_fingerprint`)."""

    name: str
    path: Path
    weights_hash: str

    @property
    def fingerprint(self) -> str:
        return model_fingerprint(self.path, self.weights_hash)


def check_model_dir(path: Path) -> None:
    """Raise :class:`UserError` unless ``path`` is a HF model directory with safetensors."""
    if not (path / "config.json").is_file():
        raise UserError(
            f"{path} is not a model directory (no config.json): pass a Hugging Face"
            " model directory, a hub id, or 'tiny'"
        )
    if not any(path.glob("*.safetensors")):
        raise UserError(
            f"{path} has no .safetensors weights: convert the model with "
            "save_pretrained(..., safe_serialization=True)"
        )


def resolve_model(spec: str, model_store: Path) -> ModelRef:
    """Turn a ``--model`` value into a model directory.

    - ``tiny``: built into the store on first use (offline, deterministic) and reused.
    - an existing local directory: used in place after checking it holds a config and
      safetensors weights.
    - ``org/name``: downloaded with huggingface_hub into the store (safetensors and tokenizer
      files only); without network this fails with one message naming the alternatives.
    """
    if spec == "tiny":
        # Concurrent runs (a study) build it once: the others wait, then find it built.
        with file_lock(model_store / f".tiny-v{TINY_VERSION}.lock"):
            path = build_tiny(model_store / f"tiny-v{TINY_VERSION}")
        return ModelRef(spec, path, weights_hash(path))
    local = Path(spec).expanduser()
    if local.exists():
        if not local.is_dir():
            raise UserError(f"--model {spec}: a file, not a directory; pass the model directory")
        local = local.resolve()
        check_model_dir(local)
        return ModelRef(spec, local, weights_hash(local))
    if not _HUB_ID.match(spec):
        raise UserError(
            f"unknown model {spec!r}: use 'tiny', a local Hugging Face model "
            "directory, or a hub id such as Qwen/Qwen2.5-1.5B-Instruct"
        )
    return _download(spec, model_store)


def _download(repo_id: str, model_store: Path) -> ModelRef:
    from huggingface_hub import snapshot_download

    dest = model_store / "hub" / repo_id.replace("/", "--")
    try:
        # One download per model at a time: concurrent runs would write the same local_dir.
        with file_lock(dest.with_name(f".{dest.name}.lock")):
            path = Path(snapshot_download(repo_id, local_dir=dest, allow_patterns=_HUB_PATTERNS))
    except Exception as err:  # offline, unknown repo, gated repo...: all one user message
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(
            f"could not download {repo_id} from the Hugging Face hub ({reason}): "
            "check the network and the id, or pass a local model directory"
        ) from None
    check_model_dir(path)
    return ModelRef(repo_id, path, weights_hash(path))
