"""A submission's way through the grader (:class:`SubmissionPipeline`: from the path the
agent sent to a settled ledger row), the checks on a submitted model directory, and the
private copy the grader evaluates.

A submission is untrusted data, and so is the workspace it sits in: the agent owns
``workspace/output`` and may replace it, or anything under it, with a symlink at any moment.
So nothing here trusts a path the agent can change:

- :func:`resolve_submission` opens the workspace's ``output/`` itself with ``O_NOFOLLOW``
  (an ``output`` that is a symlink is refused) and walks ``model_path`` from that directory
  handle, one component at a time, following a symlink only while it stays beneath
  ``output/`` (the rule of ``openat2(RESOLVE_BENEATH)``); a path outside is refused from
  its text alone, so the answer never reveals whether a host path exists.
- :func:`precheck_submission` and :func:`stage_submission` open the
  resolved directory again component by component from ``/`` with ``O_NOFOLLOW``: a symlink
  swapped in after the resolution fails instead of being followed.
- The grader *copies* the files it needs into the run's private grading directory and checks
  and evaluates the copy, so the agent cannot swap anything between the check and the
  evaluation. The copy must hold ``config.json`` and ``*.safetensors`` weights; pickle weights
  and custom code (``auto_map``) are refused; its size is bounded; every JSON file and every
  safetensors header is parsed strictly (:func:`check_model_files`), and the weights must be
  exactly the tensors the config's architecture has (:func:`check_weights_match_config`), so
  a config cannot make the loader build layers the weights do not hold.

Every refusal is a :class:`SubmissionError` (an HTTP 4xx with a message naming the fix);
no malformed input raises anything else.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import shutil
import stat
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agent2rl.grading.evaluator import WarmWorker, describe, run_evaluation
from agent2rl.grading.ledger import Ledger, SubmissionStatus
from agent2rl.http_api import Refused
from agent2rl.integrity.identity import check_identity
from agent2rl.models.weights import (
    MODEL_FILE_PATTERNS,
    MalformedWeights,
    TensorInfo,
    loads_json,
    model_files,
    model_fingerprint,
    read_safetensors_header,
    weights_hash,
)

if TYPE_CHECKING:
    from agent2rl.grading.app import GradingContext

# Weights formats that unpickle (run code) when loaded.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
#: What the transformers loader reads: the single file if present, else the sharded index.
SINGLE_WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
#: Larger JSON files are refused (big tokenizers are ~30 MiB; configs are a few KiB).
MAX_JSON_BYTES = 64 * 2**20
#: Entries :func:`precheck_submission` looks at before refusing the directory as too big.
MAX_ENTRIES = 50_000
#: Symlinks followed while resolving one ``model_path`` (the kernel's own limit is 40).
MAX_SYMLINKS = 40
#: Config fields that say how many modules to build. Each must be at most the number of
#: tensors in the weights (every layer or expert has at least one), checked before
#: transformers reads the config: its constructors allocate per layer
#: (``layer_types``), so ``num_hidden_layers = 10**9`` would hang the grader first.
_MODULE_COUNTS = re.compile(
    r"num_hidden_layers|num_layers|n_layers?|num_decoder_layers|decoder_layers"
    r"|num_local_experts|num_experts|n_routed_experts"
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in must not hang the open (it is then refused as not regular).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class SubmissionError(Refused):
    """A refused submission: ``status`` is the HTTP status, the message says what to fix.
    For the rejection the service records: ``path``, the submitted path, and ``sub_id``, the
    row to withdraw when the refusal came after the submission was recorded (else None)."""

    def __init__(
        self, message: str, status: int = 400, path: str | None = None, sub_id: int | None = None
    ) -> None:
        super().__init__(status, message)
        self.path, self.sub_id = path, sub_id


@dataclass(frozen=True)
class SubmissionLimits:
    max_bytes: int


def _outside(model_path: str) -> SubmissionError:
    return SubmissionError(
        f"model_path {model_path!r} is outside output/: submissions must be"
        " directories inside the workspace's output/ directory",
        403,
    )


def _too_big(max_bytes: int, held: str = "") -> SubmissionError:
    return SubmissionError(
        f"submission is over the size limit of {max_bytes / 2**20:.0f} MiB{held}: submit only"
        " the merged model (no optimizer state or checkpoints)",
        413,
    )


def _changed(what: str) -> SubmissionError:
    return SubmissionError(
        f"{what} changed while it was being read: submit again once the model is fully written"
    )


def _open_output(workspace: Path) -> int:
    """A directory handle on ``workspace/output``, refusing an ``output`` that is a symlink
    (the agent may have replaced the directory the harness made with a link anywhere)."""
    ws_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open("output", _DIR_FLAGS, dir_fd=ws_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SubmissionError(
                "the workspace's output/ is not a plain directory (it is a symlink or a"
                " file): remove it, make output/ a real directory again and save models"
                " inside it",
                403,
            ) from None
        if err.errno == errno.ENOENT:
            raise SubmissionError(
                "the workspace has no output/ directory: create it and save the model"
                " inside it (e.g. output/v1)",
                404,
            ) from None
        raise SubmissionError(  # EACCES: the agent may chmod its own output/
            f"the workspace's output/ cannot be opened ({os.strerror(err.errno)}): make it"
            " a readable directory again",
            403,
        ) from None
    finally:
        os.close(ws_fd)


def _beneath_output(path: PurePosixPath, outputs: list[PurePosixPath]) -> list[str] | None:
    """The components of absolute ``path`` below one of ``outputs`` (lexically), or None."""
    for out in outputs:
        if path.is_relative_to(out):
            return list(path.relative_to(out).parts)
    return None


def resolve_submission(model_path: str, workspace: Path) -> Path:
    """The real directory behind ``model_path`` (absolute, or relative to the workspace),
    walked from a handle on the workspace's real ``output/`` (the module docstring):
    ``realpath(workspace)/output/<components>``, free of symlinks at the time of the walk.

    Raises :class:`SubmissionError`: 403 if ``output`` is a symlink, or the path or a symlink
    on the way leads outside ``output/`` (``../``, absolute paths elsewhere, escaping links)
    or to ``output/`` itself, decided from the text alone (an absolute path outside gets the
    same 403 whether or not it exists on the host); 404 if it does not exist inside
    ``output/``; 400 if it is not a directory or has too many symlinks.
    """
    if not isinstance(model_path, str) or not model_path.strip() or "\x00" in model_path:
        raise SubmissionError("model_path must be a non-empty path string, e.g. 'output/v1'")
    real_ws = Path(os.path.realpath(workspace))
    # The spellings of output/ an agent may use in an absolute path or link.
    outputs = list(
        dict.fromkeys(
            PurePosixPath(os.path.normpath(p / "output"))
            for p in (Path(os.path.abspath(workspace)), real_ws)
        )
    )
    pending = deque(_output_parts(model_path, outputs))  # before output/ is opened: text only
    out_fd = _open_output(workspace)
    stack: list[tuple[str, int]] = []  # the directories walked so far below output/
    try:
        links = 0
        while pending:
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if not stack:
                    raise _outside(model_path)
                os.close(stack.pop()[1])
                continue
            here = stack[-1][1] if stack else out_fd
            try:
                st = os.stat(part, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                raise SubmissionError(
                    f"model_path {model_path!r} does not exist: save the model under "
                    "output/ first (e.g. output/v1)",
                    404,
                ) from None
            except OSError as err:  # ENAMETOOLONG, EACCES, ENOTDIR: inside output/, agent-made
                raise SubmissionError(
                    f"model_path {model_path!r} cannot be opened ({os.strerror(err.errno)})"
                ) from None
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_SYMLINKS:
                    raise SubmissionError(
                        f"model_path {model_path!r} goes through more than {MAX_SYMLINKS}"
                        " symlinks: submit the model directory itself"
                    )
                pending.extendleft(reversed(_link_parts(model_path, part, here, outputs, stack)))
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise SubmissionError(
                    f"model_path {model_path!r} is not a directory: submit the model "
                    "directory written by save_pretrained"
                )
            try:
                stack.append((part, os.open(part, _DIR_FLAGS, dir_fd=here)))
            except OSError:
                raise _changed(f"model_path {model_path!r}") from None
        if not stack:
            raise _outside(model_path)
        return real_ws.joinpath("output", *(name for name, _ in stack))
    finally:
        for _, fd in stack:
            os.close(fd)
        os.close(out_fd)


def _output_parts(model_path: str, outputs: list[PurePosixPath]) -> list[str]:
    """The components of ``model_path`` below ``output/``, from its text alone (403 when it
    is not beneath one of ``outputs``, the spellings of ``output/``, or ``output/...``)."""
    raw = PurePosixPath(os.path.normpath(model_path))
    if raw.is_absolute():
        parts = _beneath_output(raw, outputs)
    else:
        parts = list(raw.parts[1:]) if raw.parts[:1] == ("output",) else None
    if parts is None:
        raise _outside(model_path)
    return parts


def _link_parts(
    model_path: str, link: str, dir_fd: int, outputs: list[PurePosixPath], stack: list
) -> list[str]:
    """The components that replace symlink ``link`` (in ``dir_fd``) in :func:`resolve_submission`'s
    walk. An absolute target must lie beneath ``output/`` (403 otherwise), and the walk
    restarts there: the directories walked so far (``stack``) are closed and emptied."""
    try:
        target = PurePosixPath(os.readlink(link, dir_fd=dir_fd))
    except OSError:
        raise _changed(f"model_path {model_path!r}") from None
    if not target.is_absolute():
        return list(target.parts)
    inside = _beneath_output(PurePosixPath(os.path.normpath(target)), outputs)
    if inside is None:
        raise _outside(model_path)
    while stack:
        os.close(stack.pop()[1])
    return inside


def submission_roots(workspace: Path, base_model_dir: Path) -> list[Path]:
    """The ``allowed_roots`` for :func:`stage_submission`: the workspace's own ``output/``
    (refused with 403 if it is a symlink, so a link swapped in cannot widen the root) and
    the base model (whose tokenizer files agents often link to)."""
    os.close(_open_output(workspace))
    return [Path(os.path.realpath(workspace)) / "output", Path(os.path.realpath(base_model_dir))]


def _open_dir_nofollow(path: Path) -> int:
    """A handle on absolute directory ``path``, opening each component with ``O_NOFOLLOW``
    from ``/``: raises ``OSError`` if any component is (now) a symlink or missing."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in Path(path).parts[1:]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_model_dir(model_dir: Path) -> int:
    try:
        return _open_dir_nofollow(model_dir)
    except OSError:
        raise _changed("the submission directory") from None


def _entries(dir_fd: int) -> list[os.DirEntry]:
    with os.scandir(dir_fd) as it:
        return list(it)


def precheck_submission(model_dir: Path) -> None:
    """Cheap checks with friendly messages before anything is copied.

    Refuses pickle weights anywhere in the directory (symlinked directories are not
    followed), a tree of more than :data:`MAX_ENTRIES` entries, and a directory without
    ``config.json`` or ``*.safetensors`` at its top.
    """
    top = _open_model_dir(model_dir)
    pickles: list[str] = []
    seen = 0
    todo = [top]
    try:
        while todo:
            fd = todo.pop()
            try:
                entries = _entries(fd)
                seen += len(entries)
                if seen > MAX_ENTRIES:
                    raise SubmissionError(
                        f"the submission holds more than {MAX_ENTRIES} files: submit only"
                        " the model directory written by save_pretrained"
                    )
                pickles += [e.name for e in entries if e.name.endswith(PICKLE_SUFFIXES)]
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        # vanished or unreadable: nothing in it is copied anyway
                        with contextlib.suppress(OSError):
                            todo.append(os.open(entry.name, _DIR_FLAGS, dir_fd=fd))
            finally:
                if fd != top:
                    os.close(fd)
        names = {e.name for e in _entries(top)}
    finally:
        for fd in todo:
            os.close(fd)
        os.close(top)
    if pickles:
        raise SubmissionError(
            f"pickle weights are refused ({', '.join(sorted(pickles)[:3])}): save with "
            "save_pretrained(..., safe_serialization=True) and remove them"
        )
    if "config.json" not in names:
        raise SubmissionError(
            "no config.json in the submission: submit the directory written by save_pretrained"
        )
    if not any(n.endswith(".safetensors") for n in names):
        raise SubmissionError(
            "no *.safetensors weights in the submission: save the full merged"
            " model with safe_serialization=True"
        )


def _needed_names(dir_fd: int) -> list[str]:
    # Regular files and symlinks (checked when copied); directories are never copied.
    return sorted(
        e.name
        for e in _entries(dir_fd)
        if any(fnmatch.fnmatchcase(e.name, p) for p in ("*.safetensors", *MODEL_FILE_PATTERNS))
        and (e.is_file(follow_symlinks=False) or e.is_symlink())
    )


def _needed_bytes(model_dir: Path) -> int:
    """The size of the files of ``model_dir`` (top level only) a model needs: weights and
    :data:`MODEL_FILE_PATTERNS`; scripts, optimizer state and the like are left behind. A
    symlink counts its target (:func:`stage_submission` checks where it leads); a file that
    vanished or is unreadable counts 0 (staging refuses it with a clear message)."""
    fd = _open_model_dir(model_dir)
    total = 0
    try:
        for name in _needed_names(fd):
            with contextlib.suppress(OSError):
                total += os.stat(name, dir_fd=fd).st_size
    finally:
        os.close(fd)
    return total


def stage_submission(
    model_dir: Path,
    dest: Path,
    allowed_roots: list[Path],
    limits: SubmissionLimits,
    base_model_dir: Path | None = None,
) -> Path:
    """Copy the files a model needs into ``dest`` (private), then check the copy
    (:func:`check_model_files`; with ``base_model_dir``, :func:`check_tokenizer_pipeline`).

    Files are opened relative to an ``O_NOFOLLOW`` handle on ``model_dir``; one that is a
    symlink must lead into ``allowed_roots`` (best from :func:`submission_roots`, narrowed by
    :func:`_narrowed_roots`) and is opened from its root by :func:`_open_beneath`. The size
    bound counts the bytes actually copied. On any refusal ``dest`` is removed and
    :class:`SubmissionError` raised; ``OSError`` comes out only for the grader's own I/O
    failures (a full disk).
    """
    try:
        dest.mkdir(parents=True, exist_ok=False)
        roots = _narrowed_roots(model_dir, allowed_roots)
        src_fd = _open_model_dir(model_dir)
        try:
            total = 0
            for name in _needed_names(src_fd):
                with os.fdopen(_open_entry(src_fd, model_dir, name, roots), "rb") as fh:
                    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                        raise SubmissionError(f"{name} is not a regular file")
                    with (dest / name).open("wb") as out:
                        while chunk := fh.read(1 << 20):
                            total += len(chunk)
                            if total > limits.max_bytes:
                                raise _too_big(limits.max_bytes)
                            out.write(chunk)
        finally:
            os.close(src_fd)
        if not (dest / "config.json").is_file() or not any(dest.glob("*.safetensors")):
            raise _changed("the submission")
        check_model_files(dest)
        if base_model_dir is not None:
            check_tokenizer_pipeline(dest, base_model_dir)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _narrowed_roots(model_dir: Path, roots: list[Path]) -> list[Path]:
    """``roots`` with the one holding ``model_dir`` narrowed to ``model_dir``'s deepest
    ancestor named ``output``.

    Why: a caller that computes the output root as ``(workspace / "output").resolve()``
    gets the target of a symlink if the agent swapped ``output`` for one at that moment
    (``output -> ..`` makes it the run directory, ``output -> /`` the whole host). A root
    that holds ``model_dir`` (which :func:`resolve_submission` walked inside the real
    ``output/``) but lies above that ancestor is such a widened root; a root that does not
    hold it at all means ``output`` pointed elsewhere. Either way only the real ``output/``
    (or, for a model below a nested ``output/``, that narrower directory) is kept.
    """
    holding = [r for r in roots if model_dir.is_relative_to(r) and model_dir != r]
    for ancestor in model_dir.parents:
        if ancestor.name == "output" and any(ancestor.is_relative_to(r) for r in holding):
            return [ancestor, *(r for r in roots if r not in holding)]
    raise _changed("the workspace's output/")


def _open_beneath(real: Path, roots: list[Path], name: str) -> int:
    """Open ``real`` for reading without following any symlink, its roots' path included.

    Why so careful: opening the run's ledger (SQLite) in this process and closing it again
    would drop SQLite's POSIX locks on it, so a submission's symlink to the ledger must never
    be opened, not even to be refused. ``real`` is checked against ``roots`` first; then the
    root and each component below it are opened with ``O_NOFOLLOW``, so a symlink swapped in
    after the check (``output`` included) fails instead of being followed.
    """
    root = next((r for r in roots if real.is_relative_to(r) and real != r), None)
    if root is None:
        raise SubmissionError(
            f"{name} links outside output/ and the base model: copy the file "
            "into the submission instead",
            403,
        )
    try:
        fd = _open_dir_nofollow(real.parent)  # the root and each component below it
        try:
            return os.open(real.name, _FILE_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
    except OSError:
        raise _changed(name) from None


def _open_entry(src_fd: int, model_dir: Path, name: str, roots: list[Path]) -> int:
    """Open top-level file ``name`` of the submission: a plain file relative to the
    directory handle, a symlink only where it leads into ``roots``."""
    try:
        return os.open(name, _FILE_FLAGS, dir_fd=src_fd)
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EPERM):
            raise SubmissionError(
                f"{name} cannot be read by the grader ({os.strerror(err.errno)}): make the"
                " model's files readable (chmod a+r)"
            ) from None
        if err.errno != errno.ELOOP:  # vanished, or not a file that can be opened
            raise _changed(name) from None
    try:
        target = os.readlink(name, dir_fd=src_fd)
    except OSError:
        raise _changed(name) from None
    # Where the link leads, resolved as text from the submission's own (symlink-free) path;
    # whatever it resolves to is then opened from its root with O_NOFOLLOW.
    real = Path(os.path.realpath(model_dir / target))
    return _open_beneath(real, roots, name)


# -- the checks on the private copy ---------------------------------------------------------


def _read_json(path: Path) -> Any:
    """A JSON file of the copy, parsed with bounded size and depth."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise SubmissionError(
            f"{path.name} is {size / 2**20:.0f} MiB, over the {MAX_JSON_BYTES / 2**20:.0f} MiB"
            " a model's JSON file may have: submit the files save_pretrained wrote"
        )
    try:
        return loads_json(path.read_bytes(), path.name)
    except ValueError as err:
        raise SubmissionError(f"{err}: submit the files save_pretrained wrote") from None


def check_model_files(model_dir: Path) -> None:
    """Check a (private, copied) model directory; :class:`SubmissionError` (400) names the
    first problem. Every ``*.json`` file is a JSON object of at most :data:`MAX_JSON_BYTES`
    and :data:`~agent2rl.models.weights.MAX_JSON_DEPTH` levels; ``config.json`` and
    ``tokenizer_config.json`` have no ``auto_map`` (custom code); a ``tokenizer.json`` is
    readable by the tokenizers library; every ``*.safetensors`` header is valid; the weights
    the loader reads match the config exactly."""
    configs: dict[str, dict[str, Any]] = {}
    for path in sorted(model_dir.glob("*.json")):
        data = _read_json(path)
        if not isinstance(data, dict):
            raise SubmissionError(f"{path.name} must be a JSON object")
        configs[path.name] = data
    for name in ("config.json", "tokenizer_config.json"):
        if "auto_map" in configs.get(name, {}):
            raise SubmissionError(
                f"{name} has auto_map (custom model code), which is "
                "refused: use a model class built into transformers"
            )
    if "tokenizer.json" in configs:
        _check_tokenizer(model_dir / "tokenizer.json")
    headers: dict[str, dict[str, TensorInfo]] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            headers[path.name] = read_safetensors_header(path)[1]
        except MalformedWeights as err:
            raise SubmissionError(
                f"malformed weights: {err}: save the model again with"
                " save_pretrained(..., safe_serialization=True)"
            ) from None
    tensors = _loaded_tensors(headers, configs.get(WEIGHTS_INDEX))
    check_weights_match_config(model_dir, configs.get("config.json", {}), tensors)


def _check_tokenizer(path: Path) -> None:
    """Refuse a ``tokenizer.json`` the tokenizers library (what the evaluator loads it with)
    cannot read: its fields have the wrong types or an unknown model."""
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(path.read_text(encoding="utf-8"))
    except BaseException as err:
        # A Rust panic comes out as pyo3's PanicException, a BaseException: it is the
        # file's fault too. Interrupts and exits are not.
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        first = next((ln for ln in str(err).splitlines() if ln.strip()), "")[:300]
        raise SubmissionError(
            f"tokenizer.json cannot be read by the tokenizers library ({first}): submit the"
            " tokenizer save_pretrained wrote"
        ) from None


def check_tokenizer_pipeline(model_dir: Path, base_model_dir: Path) -> None:
    """Load the (private, copied) ``model_dir``'s tokenizer as the evaluator will, in a child
    process, and compare its pipeline with the base model's
    (:func:`~agent2rl.inference.tokenizer_check.inspect_tokenizer`); write the outcome next to
    ``model_dir`` (:data:`~agent2rl.inference.tokenizer_check.REFERENCE_FILE`) for the
    evaluation to check on the graded prompts. Tokenizer files transformers cannot load (a
    malformed ``merges.txt``, ``vocab.*`` or ``*.model``) or a chat template that does not
    parse are refused here (400), before any evaluation rather than failing one."""
    from agent2rl.inference.tokenizer_check import (
        TokenizerUnloadable,
        inspect_tokenizer,
        write_reference,
    )

    if _same_tokenizer_files(model_dir, base_model_dir):
        return  # the base's own files (the common case): nothing to load, compare or check
    try:
        reference = inspect_tokenizer(model_dir, base_model_dir)
    except TokenizerUnloadable as err:
        raise SubmissionError(
            f"the submission's tokenizer files are malformed: {err}; submit the tokenizer"
            " files save_pretrained wrote (or the base model's)"
        ) from None
    write_reference(model_dir.parent, reference)


def _tokenizer_files(model_dir: Path) -> dict[str, Path]:
    """The top-level files of ``model_dir`` a tokenizer is loaded from: the model's files
    (:data:`MODEL_FILE_PATTERNS`) but its config, generation config and weights index."""
    skip = {"config.json", "generation_config.json"}
    return {
        p.name: p
        for p in model_files(model_dir)
        if p.name not in skip and not p.name.endswith(".safetensors.index.json")
    }


def _same_tokenizer_files(model_dir: Path, base_model_dir: Path) -> bool:
    """Whether ``model_dir`` holds exactly the base model's tokenizer files, byte for byte."""
    mine, base = _tokenizer_files(model_dir), _tokenizer_files(base_model_dir)
    if mine.keys() != base.keys():
        return False
    try:
        return all(
            mine[n].stat().st_size == base[n].stat().st_size
            and mine[n].read_bytes() == base[n].read_bytes()
            for n in mine
        )
    except OSError:
        return False


def _loaded_tensors(
    headers: dict[str, dict[str, TensorInfo]], index: dict[str, Any] | None
) -> dict[str, TensorInfo]:
    """The tensors the transformers loader reads: ``model.safetensors`` alone if present,
    else the shards ``model.safetensors.index.json`` names. A weights file the loader would
    not read is refused, as is a tensor in two shards or in a shard the index does not say."""
    if SINGLE_WEIGHTS in headers:
        unread = sorted(set(headers) - {SINGLE_WEIGHTS})
        if unread:
            raise SubmissionError(
                f"{', '.join(unread[:3])} would not be loaded (model.safetensors is):"
                " remove the extra .safetensors files"
            )
        return headers[SINGLE_WEIGHTS]
    if index is None:
        raise SubmissionError(
            "neither model.safetensors nor model.safetensors.index.json in the submission:"
            " save the model with save_pretrained(..., safe_serialization=True)"
        )
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise SubmissionError(
            f"{WEIGHTS_INDEX} has no weight_map of tensor names to files: save the model"
            " again with save_pretrained"
        )
    shards = set(weight_map.values())
    if shards != set(headers):
        missing, unlisted = sorted(shards - set(headers)), sorted(set(headers) - shards)
        raise SubmissionError(
            f"{WEIGHTS_INDEX} does not match the .safetensors files (missing:"
            f" {missing[:3]}, not in the index: {unlisted[:3]}): submit every shard it"
            " names and nothing else"
        )
    tensors: dict[str, TensorInfo] = {}
    for shard, infos in sorted(headers.items()):
        for name, info in infos.items():
            if name in tensors or weight_map.get(name) != shard:
                raise SubmissionError(
                    f"tensor {name!r} of {shard} is in two shards or not where"
                    f" {WEIGHTS_INDEX} says: save the model again with save_pretrained"
                )
            tensors[name] = info
    if set(weight_map) != set(tensors):
        absent = sorted(set(weight_map) - set(tensors))
        raise SubmissionError(
            f"{WEIGHTS_INDEX} names tensors no shard holds ({', '.join(absent[:3])}):"
            " submit every shard"
        )
    return tensors


def _module_counts(config: Any) -> list[tuple[str, int]]:
    """``(field, value)`` of every :data:`_MODULE_COUNTS` integer in a config (nested
    sub-configs included; the JSON is already depth-bounded)."""
    found: list[tuple[str, int]] = []
    if isinstance(config, dict):
        for key, value in config.items():
            if _MODULE_COUNTS.fullmatch(key) and isinstance(value, int):
                found.append((key, value))
            found += _module_counts(value)
    elif isinstance(config, list):
        for value in config:
            found += _module_counts(value)
    return found


def check_weights_match_config(
    model_dir: Path, config: dict[str, Any], tensors: dict[str, TensorInfo]
) -> None:
    """Refuse weights that are not exactly the tensors ``config.json``'s architecture has.

    The model is built from the config on the ``meta`` device (no memory, no custom code)
    with the class the evaluator loads (``AutoModelForCausalLM``), and its state dict
    compared with ``tensors``: every name present with the same shape, nothing extra.
    A tensor may be absent where the model ties it to one that is present (``lm_head``
    tied to the embeddings) or where transformers itself ignores it when missing; an extra
    tensor is allowed where transformers ignores it when unexpected. For architectures whose
    checkpoints transformers converts while loading (fused MoE experts), names cannot be
    compared, and the element count must match instead. dtypes may differ (the loader
    casts). Raises :class:`SubmissionError` (400) naming the first few differences.
    """
    for key, value in _module_counts(config):
        if value > len(tensors):
            raise SubmissionError(
                f"config.json says {key} = {value}, but the weights hold only {len(tensors)}"
                " tensors: the config does not describe these weights; submit the config"
                " saved with them"
            )
    if not isinstance(config.get("model_type"), str):
        # Without it transformers guesses the type from the directory's path.
        raise SubmissionError(
            "config.json has no model_type: submit the config save_pretrained wrote"
        )
    model = _meta_model(model_dir)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if _converts_checkpoints(model):
        _check_element_count(model, tensors)
        return
    aliases: dict[int, set[str]] = {}
    for name, t in [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]:
        aliases.setdefault(id(t), set()).add(name)
    alias_of = {name: group for group in aliases.values() for name in group}
    ignore_missing = _patterns(model, "_keys_to_ignore_on_load_missing", "_keys_to_ignore_on_save")
    ignore_extra = _patterns(model, "_keys_to_ignore_on_load_unexpected")
    missing = [
        name
        for name in expected
        if name not in tensors
        and not (alias_of.get(name, set()) & tensors.keys())
        and not any(p.search(name) for p in ignore_missing)
    ]
    extra = [n for n in tensors if n not in expected and not any(p.search(n) for p in ignore_extra)]
    wrong = [
        f"{n} {list(tensors[n].shape)} (config: {list(expected[n])})"
        for n in tensors
        if n in expected and tensors[n].shape != expected[n]
    ]
    problems = [
        f"{what}{', '.join(names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        for what, names in (
            ("missing ", missing),
            ("not in the architecture ", extra),
            ("shapes differ: ", wrong),
        )
        if names
    ]
    if problems:
        raise SubmissionError(
            "the weights do not match config.json ("
            + "; ".join(problems)
            + "): the loader would build layers at random or fail; submit the config.json"
            " saved together with these weights"
        )


def _meta_model(model_dir: Path) -> Any:
    """The model :func:`check_weights_match_config` compares with; 400 when transformers
    cannot build it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
        with torch.device("meta"):
            # dtype given: from_config would otherwise set torch's process-wide default
            # dtype to the config's for the duration, under the other threads' feet.
            return AutoModelForCausalLM.from_config(
                cfg, trust_remote_code=False, dtype=torch.float32
            )
    except Exception as err:  # any error of transformers on a config we do not control
        first = next((ln for ln in str(err).splitlines() if ln.strip()), "")[:300]
        raise SubmissionError(
            f"config.json does not describe a causal LM transformers can build"
            f" ({type(err).__name__}: {first}): submit the config save_pretrained wrote"
        ) from None


def _patterns(model: Any, *attrs: str) -> list[re.Pattern[str]]:
    out: list[re.Pattern[str]] = []
    for attr in attrs:
        for pattern in getattr(model, attr, None) or []:
            with contextlib.suppress(re.error, TypeError):
                out.append(re.compile(pattern))
    return out


def _converts_checkpoints(model: Any) -> bool:
    """Whether transformers renames or reshapes this architecture's tensors while loading
    (then the checkpoint's names are not the state dict's)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
    except ImportError:  # transformers 4: no load-time conversions
        return False
    try:
        return bool(get_model_conversion_mapping(model, add_legacy=False))
    except Exception:  # an API change: fall back to the weaker check
        return True


def _check_element_count(model: Any, tensors: dict[str, TensorInfo]) -> None:
    state = list(model.state_dict(keep_vars=True).values())
    every = sum(t.numel() for t in state)  # tied tensors counted under each name
    distinct = sum({id(t): t.numel() for t in state}.values())
    have = sum(t.numel for t in tensors.values())
    if not distinct <= have <= every:
        raise SubmissionError(
            f"the weights hold {have} parameters but config.json's architecture has"
            f" {distinct}: submit the config.json saved together with these weights"
        )


#: The reason of every row the run's end (or a stopping service) leaves unsettled.
RUN_ENDED = (
    "the run ended before this submission was graded (the grading service stopped): "
    "not the model's fault"
)


class SubmissionPipeline:
    """One submission, from the path the agent sent to a settled ledger row:
    resolve -> check -> snapshot -> stage -> hash -> identity -> evaluate.

    The ledger is written at these points and no others (each a single row update):

    1. **recorded**: the row, ``evaluating``, right after the token and the clock are
       checked and before anything slow (the run's end waits for such rows);
    2. **resolved**: its ``path`` relative to the workspace, once resolved and prechecked;
    3. **snapshot**: the code snapshot's commit (a failure goes to meta ``snapshot_errors``
       and never fails the submission);
    4. **hashed**: ``weights_hash``, ``fingerprint``, ``is_copy`` and the staging timings,
       once the files the model needs are copied into ``grading/submissions/<id>/model``
       (``ctx.staging_slots`` at a time, only when the disk has room for them plus
       ``ctx.disk_margin_bytes``);
    5. **identity**: the identity report, just before the evaluation (one at a time per run);
    6. **settled**: ``graded`` or ``failed`` with its outcome, or at once from a known
       outcome, without queueing (the base model itself, the same files graded before).

    A refusal up to staging (bad files, too big, no room, a full disk) raises
    :class:`SubmissionError` carrying the row's id, and the caller *withdraws* the row: in
    one transaction it is deleted and a rejection recorded; a refused attempt is never a
    submission. Anything else that goes wrong ends the row ``failed`` with a reason
    (``harness`` for the grader's own errors): no row is left ``evaluating`` by an exception.
    """

    def __init__(
        self, ctx: GradingContext, ledger: Ledger, baseline: dict[str, Any], warm: WarmWorker | None
    ) -> None:
        self.ctx, self.ledger, self.baseline, self.warm = ctx, ledger, baseline, warm
        self.base_hash: str | None = ledger.get_meta("base_weights_hash")
        self.base_fingerprint: str | None = ledger.get_meta("base_fingerprint")
        self.slots = threading.BoundedSemaphore(max(1, ctx.staging_slots))
        self.meta_lock = threading.Lock()
        #: rows this pipeline recorded (settled or not), for the service's stop
        self.recorded: set[int] = set()
        # Under the validation protocol a copy may be graded on the private split at the
        # end: its weights are pruned by the service instead of after the evaluation.
        self.keep_weights = ctx.feedback == "validation"

    def run(self, model_path: str, on_recorded: Callable[[int], None]) -> int:
        """Record, stage and grade ``model_path``; returns the row's id once it is settled.
        ``on_recorded(id)`` is called as soon as the row exists (before anything slow)."""
        sub_id = self.ledger.add_submission(
            capped(model_path) or "", None, None, None, split=self.ctx.eval_spec.split
        )
        self.recorded.add(sub_id)
        on_recorded(sub_id)
        staging = time.time()
        try:
            copy = self._take_in(sub_id, model_path)
        except SubmissionError as err:  # refused: nothing of it is kept, the row withdrawn
            shutil.rmtree(self.ctx.paths.submission_dir(sub_id), ignore_errors=True)
            err.path, err.sub_id = model_path, sub_id
            raise
        except Exception as err:  # the grader's own failure: recorded on the row
            traceback.print_exc(file=sys.stderr)
            self._fail(
                sub_id, f"the grader could not copy the submission ({describe(err)}): submit again"
            )
        else:
            self._grade(sub_id, copy, time.time() - staging)
        return sub_id

    def _fail(self, sub_id: int, error: str, kind: str = "harness") -> None:
        self.ledger.update_submission(
            sub_id,
            status=SubmissionStatus.FAILED,
            error=error,
            failure_kind=kind,
            finished_at=time.time(),
        )

    def _take_in(self, sub_id: int, model_path: str) -> Path:
        """Resolve and check the path and files, snapshot the code, copy the model privately;
        raises :class:`SubmissionError` for a refusal."""
        ctx = self.ctx
        model_dir = resolve_submission(model_path, ctx.paths.workspace)
        precheck_submission(model_dir)
        rel = str(model_dir.relative_to(ctx.paths.workspace.resolve()))
        self.ledger.update_submission(sub_id, path=rel)
        self._snapshot(sub_id, rel)
        sub_dir = ctx.paths.submission_dir(sub_id)
        with self.slots:
            # Checked under the slot: concurrent copies cannot all pass one free-space reading.
            need = _needed_bytes(model_dir)
            # Before the disk check: a sparse 200 GB file is a submission over the limit (413),
            # not a grader short of disk (507).
            if need > ctx.limits.max_bytes:
                raise _too_big(ctx.limits.max_bytes, f" (its files hold {need / 2**20:.0f} MiB)")
            sub_dir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(sub_dir).free
            if free < need + ctx.disk_margin_bytes:
                raise SubmissionError(
                    f"the grader's disk is too full to copy this submission ({free / 2**20:.0f} "
                    f"MiB free, it needs {need / 2**20:.0f} MiB plus "
                    f"{ctx.disk_margin_bytes / 2**20:.0f} MiB to spare): submit again later",
                    507,
                )
            partial = sub_dir / "model.partial"
            roots = submission_roots(ctx.paths.workspace, ctx.base_model_dir)
            try:
                stage_submission(model_dir, partial, roots, ctx.limits, ctx.base_model_dir)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                raise SubmissionError(
                    "the grader's disk filled up while copying this submission (no space left"
                    " on device): it was not accepted; submit again later",
                    507,
                ) from None
            return partial.rename(sub_dir / "model")

    def _snapshot(self, sub_id: int, rel: str) -> None:
        """The code snapshot for this submission; a failure is logged, never fatal."""
        if not self.ctx.snapshot:
            return
        try:
            self.ledger.update_submission(sub_id, snapshot=self.ctx.snapshot(f"submission: {rel}"))
        except Exception as err:  # a recording failure must not cost the agent its submission
            traceback.print_exc(file=sys.stderr)
            with self.meta_lock:
                errors = self.ledger.get_meta("snapshot_errors") or {}
                errors[str(sub_id)] = describe(err)[:500]
                self.ledger.set_meta("snapshot_errors", errors)

    def _grade(self, sub_id: int, copy: Path, staging_s: float) -> None:
        """Hash the private copy and record it (hashing counts as staging: ``staging_s`` is
        the time spent checking and copying it, for the row's ``timings``), then settle or
        evaluate it. Never raises: any exception ends the row failed (``harness``) with the
        reason, and the weights copy is removed unless kept."""
        clock = time.time()
        try:
            try:
                digest = weights_hash(copy)
                fingerprint = model_fingerprint(copy, digest)
            except (OSError, ValueError) as err:
                # Malformed safetensors are the model's; an I/O error on our copy is ours.
                kind = "model" if isinstance(err, ValueError) else "harness"
                return self._fail(sub_id, f"could not read the submission: {err}", kind)
            is_copy = bool(self.base_hash) and digest == self.base_hash
            timings = {"staging_s": staging_s + time.time() - clock, "grader": self.ctx.grader}
            self.ledger.update_submission(
                sub_id,
                weights_hash=digest,
                fingerprint=fingerprint,
                is_copy=is_copy,
                timings={**timings, "evaluated": False},
            )
            self._evaluate(sub_id, copy, fingerprint, is_copy, timings)
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            self._fail(sub_id, f"the grader failed while grading ({describe(err)}): submit again")
        finally:
            if not self.keep_weights:  # only needed while evaluating
                for f in copy.glob("*.safetensors"):
                    f.unlink(missing_ok=True)

    def _evaluate(
        self, sub_id: int, copy: Path, fingerprint: str, is_copy: bool, timings: dict[str, Any]
    ) -> None:
        """Settle the row from a known outcome, or wait for this run's evaluation lock, check
        the identity and evaluate; leaves the row graded or failed (with whose fault)."""
        ctx, queued, held = self.ctx, time.time(), False
        try:
            # Settled from a known outcome before queueing, and again while waiting and once
            # the lock is held: the same files graded meanwhile (ahead in the queue) are done
            # without waiting behind other evaluations, and evaluated once.
            while not held:
                if self._settle_known(sub_id, copy, is_copy, fingerprint):
                    return
                held = ctx.eval_lock.acquire(timeout=0.5)  # one evaluation at a time per run
                if ctx.workers.stopped.is_set():
                    return self._fail(sub_id, RUN_ENDED)
            if self._settle_known(sub_id, copy, is_copy, fingerprint):
                return
            # Before the weights copy is deleted; a report, never a change to the score.
            identity = check_identity(copy, ctx.base_model_dir).to_dict()
            self.ledger.update_submission(sub_id, identity=identity)
            # The same files failed before through no fault of their own: evaluate them again.
            retried = self.ledger.retryable_failure(fingerprint)
            timings["queue_wait_s"] = time.time() - queued
            outcome = run_evaluation(
                ctx.eval_spec,
                copy,
                ctx.paths.submission_dir(sub_id),
                ctx.settings,
                timeout_s=ctx.eval_timeout_s,
                lock_wait_s=ctx.eval_lock_wait_s,
                workers=ctx.workers,
                warm=self.warm,
            )
        finally:
            if held:
                ctx.eval_lock.release()
        timings.update(outcome.timings or {})
        timings.update(evaluated=True, eval_s=outcome.seconds)
        self.ledger.update_submission(
            sub_id,
            status=SubmissionStatus.GRADED if outcome.error is None else SubmissionStatus.FAILED,
            **outcome.recorded(ctx.paths.root),
            retry_of=retried.id if retried is not None else None,
            timings=timings,
            finished_at=time.time(),
        )

    def _settle_known(self, sub_id: int, copy: Path, is_copy: bool, fingerprint: str) -> bool:
        """Settle the row without evaluating when its outcome is known: the base model
        itself (the baseline's score) or the same files as an earlier graded or model-failed
        row (that row's outcome). False when it must be evaluated."""
        scored = ("score", "n_items", "items_path", "eval_hash")
        if is_copy and fingerprint == self.base_fingerprint:  # the base model: its baseline
            known = {name: self.baseline.get(name) for name in scored}
            known.update(
                identity=check_identity(copy, self.ctx.base_model_dir).to_dict(),
                status=SubmissionStatus.GRADED,
                is_copy=True,
            )
        else:
            earlier = self.ledger.graded_with_fingerprint(fingerprint)
            if earlier is None or earlier.id == sub_id:
                return False
            # same files: same outcome
            outcome = (*scored, "status", "error", "failure_kind", "identity")
            known = {name: getattr(earlier, name) for name in outcome}
            known["duplicate_of"] = earlier.id
        self.ledger.update_submission(sub_id, eval_seconds=0.0, finished_at=time.time(), **known)
        return True


def capped(text: str | None, limit: int = 1024) -> str | None:
    """At most ``limit`` characters of agent-given text, for the ledger."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text)} characters]"
