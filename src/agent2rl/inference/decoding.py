"""How the grader decodes: agent2rl's greedy protocol, or the paper's reference table.

The paper's reference implementation (microsoft/RD-Agent, ``rdagent/scenarios/rl/autorl_bench``)
grades GSM8K and HumanEval through OpenCompass (``core/opencompass.py``), whose model settings
come from ``rdagent/components/benchmark/configs/models.yaml``: a ``default`` row and one row
per model, keyed by hub id. :data:`REFERENCE_MODELS_YAML` is that file's content as literal
data (every row, every field); a test pins it. The lookup (``_get_model_inference_config``)
is reproduced by :func:`reference_row`: the model's name exactly, else the longest key that
is a prefix of it and longer than 5 characters (case-sensitive), merged over ``default``.

The name looked up is the **base model's** (the reference passes ``base_model``, the hub id the
run was started with, never the submission's): a submission has no name of its own, and its
``config.json`` is the agent's to write. :func:`table_name` says how a base model given as a
local directory is named.

The reference's other tasks (AlpacaEval, ALFWorld, WebShop, DeepSearchQA) run their own
evaluators with ``temperature=0`` and their own output limits, never the table: under the
``reference`` protocol they decode greedily, as there (:data:`TABLE_TASKS` lists the tasks the
table applies to, and whether the row's ``max_out_len`` or the dataset config's own limit holds:
OpenCompass's ``gsm8k_gen_1d7fe4`` sets ``max_out_len=512``, which wins over the model's).

Protocols (:data:`PROTOCOLS`, ``--protocol`` of ``agent2rl run``/``eval``): ``agent2rl`` decodes
every model greedily with the task's settings; ``reference`` follows the reference as above;
``auto`` (the default) is ``reference`` on the full tasks (the paper's protocol) and
``agent2rl`` on the lite tasks (``*-lite``: fast, deterministic grading on a laptop). An explicit
``--protocol reference`` on a lite task applies the table as on the full task it stands for
(arith-lite as GSM8K).

Sampled grading (temperature > 0) draws one sample per item (OpenCompass's ``num_runs=1``) and is
seeded **per item**: :func:`item_seed` derives a prompt's seed from :attr:`Decoding.seed` and the
prompt's text, so a completion does not depend on the batch it was generated in, nor on the
order. :meth:`Decoding.to_dict` goes into the run's backend settings (run.json, the evaluation's
result.json) and into the evaluation hash, so every score says how it was decoded.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError

#: the seed of sampled grading (fixed: the same model gets the same score in every run)
DEFAULT_SEED = 0
#: ``--protocol`` values; ``auto`` resolves per task (:func:`resolve_protocol`)
PROTOCOLS = ("auto", "agent2rl", "reference")

#: ``rdagent/components/benchmark/configs/models.yaml`` at RD-Agent commit 471eb30d, verbatim
#: as data (key order kept; comments of the file in the trailing comments here).
REFERENCE_MODELS_YAML: dict[str, Any] = {
    "default": {
        "temperature": 0.0,  # Greedy decoding for reproducible results
        "top_p": 1.0,
        "top_k": 1,
        "max_seq_len": 32768,
        "max_out_len": 8192,
        "batch_size": 16,
        "tensor_parallel_size": "auto",
        "gpu_memory_utilization": 0.9,
        "repetition_penalty": 1.0,
        "dtype": "bfloat16",
        "enable_thinking": False,
        "use_cot_postprocessor": True,  # extract the answer from <think>...</think>answer
    },
    "models": {
        "Qwen/Qwen3-8B": {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "max_seq_len": 40960,
            "max_out_len": 38912,
            "enable_thinking": True,
        },
        "Qwen/Qwen3-32B": {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "max_seq_len": 40960,
            "max_out_len": 38912,
            "enable_thinking": True,
        },
        "Qwen/Qwen3-1.7B": {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "max_seq_len": 40960,
            "max_out_len": 38912,
            "enable_thinking": True,
            "gpu_memory_utilization": 0.7,
        },
        "Qwen/Qwen2.5-0.5B-Instruct": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 1,
            "max_seq_len": 32768,
            "max_out_len": 8192,
            "gpu_memory_utilization": 0.5,
        },
        "Qwen/Qwen2.5-0.5B": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 1,
            "max_seq_len": 32768,
            "max_out_len": 8192,
            "gpu_memory_utilization": 0.5,
        },
        "Qwen/Qwen2.5-7B-Instruct": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 1,
            "max_seq_len": 32768,
            "max_out_len": 8192,
            "use_cot_postprocessor": True,
        },
        "Qwen/Qwen2.5-32B-Instruct": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 1,
            "max_seq_len": 32768,
            "max_out_len": 8192,
        },
        "meta-llama/Llama-3.1-8B-Instruct": {
            "temperature": 0.7,
            "top_p": 0.95,
            "top_k": 40,
            "max_seq_len": 32768,  # 131072
            "max_out_len": 4096,
        },
        "mistralai/Mistral-7B-Instruct-v0.3": {
            "temperature": 0.7,
            "top_p": 0.95,
            "top_k": 50,
            "max_seq_len": 32768,
            "max_out_len": 8192,
        },
        "deepseek-ai/deepseek-coder-33b-instruct": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 1,
            "max_seq_len": 16384,
            "max_out_len": 4096,
        },
    },
}

#: The tasks the reference grades through OpenCompass with the table -> whether the row's
#: ``max_out_len`` is the output limit (False: the dataset config's own limit, which is the
#: task's, holds). The lite stand-in of a table task follows it.
TABLE_TASKS: dict[str, bool] = {"gsm8k": False, "humaneval": True, "arith-lite": False}

#: The context the reference's own evaluators give vLLM (``max_model_len``) on the tasks it
#: grades without the table: ``alpacaeval/eval.py`` (``eval_config.get("max_model_len",
#: 4096)``) and ``deepsearchqa/eval.py`` (``max_model_len=4096``). The lite stand-ins keep
#: their own.
REFERENCE_CONTEXT: dict[str, int] = {"alpacaeval": 4096, "deepsearchqa": 4096}

#: keys no longer than this are never matched as a prefix (the reference's
#: ``best_match_len = 5`` start value)
_MIN_PREFIX_LEN = 5


@dataclass(frozen=True)
class Decoding:
    """How every item of an evaluation is decoded. Both backends read this one object.

    ``temperature`` 0 is greedy (``top_p``/``top_k`` then change nothing). ``top_k`` 0 or
    less: off. ``enable_thinking``: passed to the chat template as ``enable_thinking=True``
    (Qwen3's switch) when True; False passes nothing, as OpenCompass does. ``max_new_tokens``:
    overrides the task's output limit; None keeps the task's. ``max_model_len``: the context
    the reference gives vLLM (``max_seq_len``), applied when the run names none.
    ``strip_reasoning``: a completion's ``<think>...</think>`` part is removed before scoring
    (:func:`strip_reasoning`, OpenCompass's ``extract-non-reasoning-content``). ``samples``:
    completions per item (1). ``seed``: the base of :func:`item_seed` (sampled only).
    ``source``: where the settings come from, in words.
    """

    protocol: str = "agent2rl"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    enable_thinking: bool = False
    max_new_tokens: int | None = None
    max_model_len: int | None = None
    strip_reasoning: bool = False
    samples: int = 1
    seed: int | None = None
    source: str = "agent2rl: greedy, the task's settings"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def is_default(self) -> bool:
        """agent2rl's plain greedy decoding (left out of backend settings and hashes, so that
        evaluation hashes from before the protocol existed stay valid)."""
        return self == GREEDY

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (run.json, result.json, the evaluation hash)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Decoding:
        """From :meth:`to_dict`'s output (unknown keys ignored); None: :data:`GREEDY`."""
        if not data:
            return GREEDY
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def describe(self) -> str:
        """One line for reports: ``greedy`` or ``sampled T=0.6 top-p 0.95 ...``, the samples
        per item and the seed, then the source."""
        if self.greedy:
            how = "greedy"
        else:
            how = f"sampled T={self.temperature:g} top-p {self.top_p:g}"
            if self.top_k > 0:
                how += f" top-k {self.top_k}"
            how += f", seed {self.seed} per item"
        parts = [how, f"{self.samples} sample(s) per item"]
        if self.enable_thinking:
            parts.append("thinking on")
        if self.max_new_tokens:
            parts.append(f"at most {self.max_new_tokens} new tokens")
        return f"{', '.join(parts)} ({self.source})"


GREEDY = Decoding()


def reference_row(model_name: str) -> tuple[str | None, dict[str, Any]]:
    """The reference's settings for ``model_name``: (the matching key or None, the merged
    row). An exact key wins; else the longest key longer than 5 characters that
    ``model_name`` starts with; else only ``default``. Case-sensitive, as the reference."""
    models: dict[str, dict[str, Any]] = REFERENCE_MODELS_YAML["models"]
    key: str | None = model_name if model_name in models else None
    if key is None:
        best = _MIN_PREFIX_LEN
        for k in models:
            if model_name.startswith(k) and len(k) > best:
                key, best = k, len(k)
    row = {**REFERENCE_MODELS_YAML["default"], **(models[key] if key else {})}
    return key, row


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def table_name(model: str, model_dir: Path | None = None) -> str:
    """The name the table is searched with for the base model given as ``model`` (the
    ``--model`` value) and loaded from ``model_dir``.

    A hub id (``Qwen/Qwen3-8B``) is its own name. A local directory is named by the hub id in
    its ``config.json``'s ``_name_or_path`` when that is one (``save_pretrained`` of a hub
    model records it), else by the key whose part after ``/`` its directory name starts with
    (``/models/Qwen3-8B`` -> ``Qwen/Qwen3-8B``; the longest such key), else by the directory
    name itself (matching no row: the default). ``tiny`` matches nothing.
    """
    path = Path(model).expanduser()
    if _HUB_ID.match(model) and not path.exists():
        return model
    if model_dir is not None:
        try:
            cfg = json.loads((Path(model_dir) / "config.json").read_text())
            named = str(cfg.get("_name_or_path") or "")
        except (OSError, ValueError, AttributeError):
            named = ""
        if _HUB_ID.match(named) and not Path(named).exists():
            return named
    base = path.name or model
    keys = [k for k in REFERENCE_MODELS_YAML["models"] if base.startswith(k.split("/", 1)[1])]
    return max(keys, key=len) if keys else base


def resolve_protocol(protocol: str, task: str) -> str:
    """``auto`` -> ``reference`` on a full task, ``agent2rl`` on a lite one (``*-lite``);
    another value as it is. :class:`UserError` for a value not in :data:`PROTOCOLS`."""
    if protocol not in PROTOCOLS:
        raise UserError(f"unknown --protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    if protocol == "auto":
        return "agent2rl" if task.endswith("-lite") else "reference"
    return protocol


def decoding_for(task: str, model_name: str, protocol: str = "auto") -> Decoding:
    """How ``task`` decodes the submissions of a run whose base model is ``model_name``
    (:func:`table_name`) under ``protocol``.

    ``agent2rl``: :data:`GREEDY`. ``reference`` on a task the reference grades without the
    table: greedy with the task's settings, saying so. ``reference`` on a :data:`TABLE_TASKS`
    task: the row's sampling, thinking switch and context, the reasoning post-processor, the
    row's output limit where the dataset config sets none, seeded with :data:`DEFAULT_SEED`.
    """
    protocol = resolve_protocol(protocol, task)
    if protocol == "agent2rl":
        return GREEDY
    if task not in TABLE_TASKS:
        context = REFERENCE_CONTEXT.get(task)
        return replace(
            GREEDY,
            protocol="reference",
            max_model_len=context,
            source=f"reference: {task} decodes greedily (its own evaluator, temperature 0"
            + (f", a {context}-token context)" if context else ")"),
        )
    key, row = reference_row(model_name)
    temperature = float(row["temperature"])
    return Decoding(
        protocol="reference",
        temperature=temperature,
        top_p=float(row["top_p"]),
        top_k=int(row["top_k"]),
        repetition_penalty=float(row["repetition_penalty"]),
        enable_thinking=bool(row["enable_thinking"]),
        max_new_tokens=int(row["max_out_len"]) if TABLE_TASKS[task] else None,
        max_model_len=int(row["max_seq_len"]),
        strip_reasoning=bool(row["enable_thinking"] or row["use_cot_postprocessor"]),
        seed=None if temperature == 0.0 else DEFAULT_SEED,
        source=f"reference models.yaml: {key or 'default'} (for {model_name})",
    )


def item_seed(seed: int | None, prompt: str) -> int:
    """The seed of one item's sample: a 63-bit hash of ``seed`` and the prompt's text (so it
    does not depend on the batch or the order; two identical prompts get the same sample)."""
    digest = hashlib.sha256(f"{seed or 0}\0{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def strip_reasoning(text: str, start: str = "<think>", end: str = "</think>") -> str:
    """``text`` without its reasoning, exactly as OpenCompass 0.5.1's
    ``extract-non-reasoning-content`` (``opencompass/utils/text_postprocessors.py`` 278-286,
    the post-processor the reference's OpenCompass template applies):

    - only an end tag -> what follows its last occurrence;
    - else every complete ``<think>...</think>`` is removed;
    - an unclosed ``<think>`` is **kept with the text after it** (the tag included): reasoning
      cut off by the output limit stays in the prediction, so GSM8K still takes its last
      number from it (agent2rl's protocol never strips, so it has no rule of its own here);
    - whitespace stripped at both ends.
    """
    if start not in text and end in text:
        return text.split(end)[-1].strip()
    return re.sub(re.escape(start) + r"(.*?)" + re.escape(end), "", text, flags=re.DOTALL).strip()
