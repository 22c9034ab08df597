"""Checks on a submitted model directory, and the private copy the grader evaluates.

A submission is untrusted data. It must resolve (symlinks followed) to a directory inside the
workspace's ``output/``; it must hold ``config.json`` and ``*.safetensors`` weights; pickle
weights and custom code (``auto_map``) are refused; its size is bounded. The grader then
*copies* the files it needs into the run's private grading directory and evaluates the copy,
so the agent cannot swap weights between the check and the evaluation.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from agent2rl.models.weights import model_files

# Weights formats that unpickle (run code) when loaded.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


class SubmissionError(Exception):
    """A refused submission: ``status`` is the HTTP status, the message says what to fix."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SubmissionLimits:
    max_bytes: int


def resolve_submission(model_path: str, workspace: Path) -> Path:
    """The real directory behind ``model_path`` (absolute, or relative to the workspace).

    Raises :class:`SubmissionError` if it does not exist, is not a directory, or lies outside
    ``workspace/output`` once symlinks are followed (``../``, absolute paths and escaping
    symlinks all end up here).
    """
    if not isinstance(model_path, str) or not model_path.strip() or "\x00" in model_path:
        raise SubmissionError("model_path must be a non-empty path string, e.g. 'output/v1'")
    output = (workspace / "output").resolve()
    raw = Path(model_path)
    candidate = raw if raw.is_absolute() else workspace / raw
    try:
        real = candidate.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError):
        raise SubmissionError(
            f"model_path {model_path!r} does not exist: save the model under "
            "output/ first (e.g. output/v1)",
            404,
        ) from None
    if not real.is_relative_to(output) or real == output:
        raise SubmissionError(
            f"model_path {model_path!r} is outside output/: submissions must be"
            " directories inside the workspace's output/ directory",
            403,
        )
    if not real.is_dir():
        raise SubmissionError(
            f"model_path {model_path!r} is not a directory: submit the model "
            "directory written by save_pretrained"
        )
    return real


def _load_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SubmissionError(f"{what} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise SubmissionError(f"{what} must be a JSON object")
    return data


def precheck_submission(model_dir: Path) -> None:
    """Cheap checks with friendly messages before anything is copied.

    Refuses pickle weights anywhere in the directory, and a directory without
    ``config.json`` or ``*.safetensors``.
    """
    pickles = sorted(p.name for p in model_dir.rglob("*") if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise SubmissionError(
            f"pickle weights are refused ({', '.join(pickles[:3])}): save with "
            "save_pretrained(..., safe_serialization=True) and remove them"
        )
    if not (model_dir / "config.json").is_file():
        raise SubmissionError(
            "no config.json in the submission: submit the directory written by save_pretrained"
        )
    if not any(model_dir.glob("*.safetensors")):
        raise SubmissionError(
            "no *.safetensors weights in the submission: save the full merged"
            " model with safe_serialization=True"
        )


def needed_files(model_dir: Path) -> list[Path]:
    """The files of ``model_dir`` (top level only) a model needs, sorted by name: weights and
    :data:`MODEL_FILE_PATTERNS`; scripts, optimizer state and the like are left behind."""
    weights = [p for p in model_dir.glob("*.safetensors") if p.is_file()]
    return sorted({*weights, *model_files(model_dir)})


def stage_submission(
    model_dir: Path, dest: Path, allowed_roots: list[Path], limits: SubmissionLimits
) -> Path:
    """Copy the files a model needs into ``dest`` (private), checking each as it is copied.

    Each file's real path must lie in ``allowed_roots`` (the workspace's output/ and the base
    model, whose tokenizer files agents often link) and is opened without following symlinks
    from there, so nothing outside can be smuggled in (see :func:`_open_beneath`).
    The size bound is enforced on the bytes actually copied. After copying, the copied
    configs are checked for ``auto_map`` (custom model code). On any refusal ``dest`` is
    removed and :class:`SubmissionError` raised.
    """
    try:
        dest.mkdir(parents=True, exist_ok=False)
        total = 0
        for f in needed_files(model_dir):
            total = _copy_checked(f, dest / f.name, allowed_roots, limits.max_bytes, total)
        for name in ("config.json", "tokenizer_config.json"):
            if (dest / name).is_file():
                cfg = _load_json(dest / name, name)
                if "auto_map" in cfg:
                    raise SubmissionError(
                        f"{name} has auto_map (custom model code), which is "
                        "refused: use a model class built into transformers"
                    )
        if not (dest / "config.json").is_file() or not any(dest.glob("*.safetensors")):
            raise SubmissionError(
                "the submission changed while it was being read: submit it "
                "again once it is fully written"
            )
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _open_beneath(real: Path, roots: list[Path], name: str) -> int:
    """Open ``real`` for reading without following any symlink below its root.

    Why so careful: opening the run's ledger (SQLite) in this process and closing it again
    would drop SQLite's POSIX locks on it, so a submission's symlink to the ledger must never
    be opened, not even to be refused. ``real`` is checked against ``roots`` first; then each
    component is opened with ``O_NOFOLLOW`` relative to its parent, so a symlink swapped in
    after the check fails instead of being followed.
    """
    root = next((r for r in roots if real.is_relative_to(r)), None)
    if root is None:
        raise SubmissionError(
            f"{name} links outside output/ and the base model: copy the file "
            "into the submission instead",
            403,
        )
    parts = real.relative_to(root).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        raise SubmissionError(
            f"{name} changed while it was being read: submit again once the model is fully written"
        ) from None
    finally:
        os.close(fd)


def _copy_checked(src: Path, dst: Path, roots: list[Path], max_bytes: int, total: int) -> int:
    fd = _open_beneath(Path(os.path.realpath(src)), roots, src.name)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SubmissionError(f"{src.name} is not a regular file")
        with dst.open("wb") as out:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
                if total > max_bytes:
                    raise SubmissionError(
                        f"submission is over the size limit of {max_bytes / 2**20:.0f} MiB: "
                        "submit only the merged model (no optimizer state or checkpoints)",
                        413,
                    )
                out.write(chunk)
    return total
