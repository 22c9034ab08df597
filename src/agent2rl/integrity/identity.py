"""Model identity: does a submission derive from the run's base model?

A run measures how far an agent improves *its* base model. An agent could instead submit
another pretrained model of the same architecture (a bigger sibling distilled down, a
checkpoint fetched from a hub), which would score well without any post-training. The check
compares a submission with the base on three things:

1. **architecture**: the config fields that define the network (:data:`ARCHITECTURE_FIELDS`)
   must be equal; other config changes are listed but are no reason;
2. **tokenizer**: the vocabulary (token -> id, merges, added tokens) must be identical;
3. **weights**: the same tensor names and shapes, and per tensor the cosine similarity of the
   flattened submission and base weights. Fine-tuning moves weights *from* the base, so the
   cosine stays well above zero; an independently trained or initialised model is unrelated
   to the base, and the cosine of two unrelated tensors of n elements is about
   ``N(0, 1/sqrt(n))``. The decision uses the share of parameters (informative tensors,
   weighted by size) whose cosine is at least :data:`MIN_COSINE`; a submission derives from
   the base when that share is at least :data:`MIN_DERIVED_SHARE`. A base tensor that is
   constant (norm weights initialised to ones) says nothing about ancestry and is left out.

The relative L2 distance ``||W - W0|| / ||W0||`` is reported next to the cosine (how far
training moved), but is not decisive: weight decay and long high-rate training inflate it.

Measurements (``benchmarks/identity_check.py``; the built-in ``tiny`` model, 1.06M parameters
in 33 informative tensors, AdamW on arith-lite's public split, batch 32):

==========================================  ==============  ===============  ===========
submission                                  median cosine   min cosine       share >= 0.5
==========================================  ==============  ===============  ===========
full fine-tune, 5 steps at lr 2e-3          0.995           0.988            1.00
full fine-tune, 300 steps at lr 2e-3        0.895           0.808            1.00
full fine-tune, 1500 steps at lr 2e-3       0.809           0.665            1.00
full fine-tune, 1500 steps, lr 1e-2, wd .1  0.519           0.255            0.55
base + trained rank-8 LoRA, merged          0.991           0.975            1.00
tiny built with seed 1 (not derived)        0.000           -0.025           0.00
base weights permuted within each tensor    0.000           -0.016           0.00
==========================================  ==============  ===============  ===========

(Figures are re-measured by the benchmark; the table is its output at the time of writing.)
A differently seeded model has |cosine| below 0.03 on every tensor; the hardest fine-tune
tried keeps a median of 0.5. :data:`MIN_COSINE` = 0.2 sits ~8 standard deviations of an
unrelated 128x128 tensor above zero and well under every fine-tune's median, and
:data:`MIN_DERIVED_SHARE` = 0.5 asks only that half the parameters show that much relation.
A submission that mixes the base into another model (``a*W0 + W_other``) with a large enough
share of the base passes: this check catches substitution, not every blend.

Tensors are streamed (``safetensors`` with torch, never pickle), one at a time, and a tensor
over :data:`SAMPLE_ELEMENTS` is compared on :data:`SAMPLE_BLOCKS` evenly spaced row blocks
of that many elements in all (the same rows on both sides), so a 7B model is checked in
seconds with a few hundred MB of memory.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

#: config.json fields that define the network: any difference is a reason.
ARCHITECTURE_FIELDS = (
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "hidden_act",
    "tie_word_embeddings",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
)
#: config.json fields that change with saving rather than with the model: never listed.
_CONFIG_NOISE = frozenset(
    {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache"}
)

#: a tensor's cosine with the base at least this counts as related (see the module docstring)
MIN_COSINE = 0.2
#: the share of informative parameters that must be related for the model to derive
MIN_DERIVED_SHARE = 0.5
#: tensors above this many elements are compared on a sample of rows
SAMPLE_ELEMENTS = 1 << 22
SAMPLE_BLOCKS = 16
#: reason and list lengths kept in a report (a hostile submission could have 10^5 tensors)
_MAX_LISTED = 20
_DIFF_LINES = 40


@dataclass(frozen=True)
class TensorStat:
    """One tensor compared with the base's. ``cosine``/``rel_l2`` are None for a constant
    base tensor (no evidence either way); ``sampled`` when only some rows were read."""

    name: str
    numel: int
    cosine: float | None
    rel_l2: float | None
    sampled: bool = False


@dataclass
class IdentityReport:
    """The outcome of :func:`check_identity`; ``to_dict`` is what the grading ledger stores.

    ``derived`` is False with at least one entry in ``reasons`` when the submission does not
    derive from the base; None when the check itself could not run (``reasons`` says why).
    ``chat_template_changed`` is reported whatever ``derived`` is: a model's own chat template
    is part of the model, and the report must show when it differs from the base's.
    """

    derived: bool | None
    reasons: list[str] = field(default_factory=list)
    architecture_diff: dict[str, list[Any]] = field(default_factory=dict)
    """Field -> [base value, submission value] for each :data:`ARCHITECTURE_FIELDS` that differs."""
    config_changes: list[str] = field(default_factory=list)
    """Other config.json fields that differ (informational)."""
    tokenizer_same: bool | None = None
    """None when the two tokenizers are stored in formats that cannot be compared."""
    tokenizer_hash: str | None = None
    base_tokenizer_hash: str | None = None
    chat_template_changed: bool = False
    chat_template_hash: str | None = None
    base_chat_template_hash: str | None = None
    chat_template_diff: str | None = None
    """A unified diff (at most :data:`_DIFF_LINES` lines) of base -> submission template."""
    tensors: int = 0
    """Tensors compared (same name and shape on both sides)."""
    missing_tensors: list[str] = field(default_factory=list)
    extra_tensors: list[str] = field(default_factory=list)
    shape_mismatches: list[str] = field(default_factory=list)
    informative_params: int = 0
    related_share: float | None = None
    """Share of informative parameters in tensors with cosine >= :data:`MIN_COSINE`."""
    median_cosine: float | None = None
    min_cosine: float | None = None
    median_rel_l2: float | None = None
    least_related: list[tuple[str, float]] = field(default_factory=list)
    """The (name, cosine) of the five least related tensors."""
    seconds: float = 0.0
    thresholds: dict[str, float] = field(
        default_factory=lambda: {"min_cosine": MIN_COSINE, "min_derived_share": MIN_DERIVED_SHARE}
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: the start of the reason a weight comparison gives; its figures stay out of the API's view
WEIGHTS_REASON = "weights unrelated to the base"


def identity_flags(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pass/fail view of a stored report that the grading API returns to the agent:
    ``derived`` (True, False, or None when the check could not run), ``reasons`` and
    ``chat_template_changed``. None in, None out (a submission checked by an older service).

    No figure of the weight comparison is in it: ``related_share`` and ``median_cosine``
    (and the weight reason's own percentages) would let an agent tune a blend of the base
    into another model until it just reads derived. The reason about weights is cut to its
    words; the figures stay in the ledger's full report, which the run's report reads.
    """
    if not isinstance(report, dict):
        return None
    reasons = [
        WEIGHTS_REASON if str(r).startswith(WEIGHTS_REASON) else str(r)
        for r in report.get("reasons") or []
    ]
    return {
        "derived": report.get("derived"),
        "reasons": reasons,
        "chat_template_changed": bool(report.get("chat_template_changed")),
    }


# -- config ------------------------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _compare_config(sub: dict[str, Any], base: dict[str, Any], report: IdentityReport) -> None:
    for key in ARCHITECTURE_FIELDS:
        if sub.get(key) != base.get(key):
            report.architecture_diff[key] = [base.get(key), sub.get(key)]
    others = (set(sub) | set(base)) - set(ARCHITECTURE_FIELDS) - _CONFIG_NOISE
    report.config_changes = sorted(k for k in others if sub.get(k) != base.get(k))[:_MAX_LISTED]
    if report.architecture_diff:
        shown = ", ".join(
            f"{k} {b!r} -> {s!r}" for k, (b, s) in list(report.architecture_diff.items())[:5]
        )
        report.reasons.append(f"architecture differs from the base: {shown}")


# -- tokenizer ---------------------------------------------------------------------------------
def _merge_text(merge: Any) -> str:
    # tokenizers writes merges as "a b" (older) or ["a", "b"] (newer): the same merge.
    return " ".join(merge) if isinstance(merge, list) else str(merge)


def tokenizer_vocab_hash(model_dir: Path) -> str | None:
    """A hash of the vocabulary of ``model_dir``'s tokenizer, independent of formatting.

    From ``tokenizer.json``: the model's vocab (token -> id, or Unigram pieces), merges and
    type, and the added tokens (content, id, special). Without it, the bytes of
    ``vocab.json``/``merges.txt`` or of a sentencepiece/tiktoken file, prefixed with the file
    kind, so that only like is compared with like. None when there is no tokenizer file. The
    chat template, the normaliser and the truncation settings are not part of it: this is
    ancestry, not behaviour. What the tokenizer does to the graded text (normaliser,
    pre-tokeniser, post-processor, decoder) is held to the base's by the grader itself
    (:mod:`agent2rl.inference.tokenizer_check`), which fails a submission that departs from it.
    """
    model_dir = Path(model_dir)
    tok = _read_json(model_dir / "tokenizer.json")
    if tok is not None and isinstance(tok.get("model"), dict):
        model = tok["model"]
        vocab = model.get("vocab")
        canon = {
            "type": model.get("type"),
            "vocab": sorted(vocab.items()) if isinstance(vocab, dict) else vocab,
            "merges": [_merge_text(m) for m in model.get("merges") or []],
            "added": sorted(
                (str(t.get("content")), t.get("id"), bool(t.get("special")))
                for t in tok.get("added_tokens") or []
                if isinstance(t, dict)
            ),
        }
        blob = json.dumps(canon, sort_keys=True, default=str).encode()
        return "json:" + hashlib.sha256(blob).hexdigest()[:32]
    for kind, names in (
        ("bpe", ("vocab.json", "merges.txt")),
        ("spm", ("tokenizer.model",)),
        ("tiktoken", tuple(sorted(p.name for p in model_dir.glob("*.tiktoken")))),
    ):
        files = [model_dir / n for n in names if (model_dir / n).is_file()]
        if files:
            digest = hashlib.sha256()
            for f in files:
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
            return f"{kind}:" + digest.hexdigest()[:32]
    return None


def chat_template(model_dir: Path) -> str | None:
    """The chat template a tokenizer loaded from ``model_dir`` would use: the
    ``chat_template.jinja`` file, else ``chat_template.json``, else ``tokenizer_config.json``'s
    ``chat_template`` (a list of named templates is rendered as JSON). None without one."""
    model_dir = Path(model_dir)
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    for name in ("chat_template.json", "tokenizer_config.json"):
        cfg = _read_json(model_dir / name)
        value = cfg.get("chat_template") if cfg else None
        if value:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return None


def _compare_templates(sub_dir: Path, base_dir: Path, report: IdentityReport) -> None:
    sub, base = chat_template(sub_dir), chat_template(base_dir)
    report.chat_template_hash = _short_hash(sub)
    report.base_chat_template_hash = _short_hash(base)
    report.chat_template_changed = sub != base
    if report.chat_template_changed:
        diff = difflib.unified_diff(
            (base or "").splitlines(),
            (sub or "").splitlines(),
            "base" if base is not None else "base (none)",
            "submission" if sub is not None else "submission (none)",
            lineterm="",
        )
        lines = list(diff)
        if len(lines) > _DIFF_LINES:
            lines = lines[:_DIFF_LINES] + [f"... {len(lines) - _DIFF_LINES} more lines"]
        report.chat_template_diff = "\n".join(line[:200] for line in lines)


def _short_hash(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text is not None else None


# -- weights -----------------------------------------------------------------------------------
def _tensor_files(model_dir: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (the last file wins a duplicate)."""
    out: dict[str, Path] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(f, framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                out[name] = f
    return out


def _row_blocks(rows: int, row_elems: int) -> list[tuple[int, int]]:
    """Row ranges to read from a tensor of ``rows`` rows: all of them when small enough, else
    :data:`SAMPLE_BLOCKS` evenly spaced blocks of about :data:`SAMPLE_ELEMENTS` in total."""
    if rows * row_elems <= SAMPLE_ELEMENTS or rows <= SAMPLE_BLOCKS:
        return [(0, rows)]
    per_block = max(1, SAMPLE_ELEMENTS // (SAMPLE_BLOCKS * max(1, row_elems)))
    starts = [round(i * (rows - per_block) / (SAMPLE_BLOCKS - 1)) for i in range(SAMPLE_BLOCKS)]
    return [(s, s + per_block) for s in starts]


def _blocks(handle: Any, name: str, blocks: list[tuple[int, int]] | None) -> Iterator[torch.Tensor]:
    """The rows ``blocks`` of tensor ``name`` as float64 vectors; None: the whole tensor (a
    scalar has no rows to slice)."""
    if blocks is None:
        yield handle.get_tensor(name).to(torch.float64).flatten()
        return
    piece = handle.get_slice(name)
    for start, end in blocks:
        yield piece[start:end].to(torch.float64).flatten()


def _compare_tensor(
    sub: Any, sub_name: str, base: Any, base_name: str, shape: list[int]
) -> TensorStat:
    """Cosine and relative L2 of one tensor pair, read block by block (float64 sums)."""
    numel = math.prod(shape)
    rows = shape[0] if shape else 0
    blocks = _row_blocks(rows, numel // rows if rows else 0) if shape else None
    sampled = blocks is not None and blocks != [(0, rows)]
    pairs = zip(_blocks(base, base_name, blocks), _blocks(sub, sub_name, blocks), strict=True)
    dot = nb = ns = nd = 0.0
    lo, hi = math.inf, -math.inf
    for w0, w in pairs:
        dot += float(torch.dot(w0, w))
        nb += float(torch.dot(w0, w0))
        ns += float(torch.dot(w, w))
        nd += float(torch.sum((w - w0) ** 2))
        if w0.numel():
            lo, hi = min(lo, float(w0.min())), max(hi, float(w0.max()))
    # A constant base tensor (RMSNorm weights start as ones) relates to any positive tensor.
    if not math.isfinite(lo) or hi - lo <= 1e-12 * max(1.0, abs(hi)) or nb == 0:
        return TensorStat(sub_name, numel, None, None, sampled)
    if not all(math.isfinite(x) for x in (dot, ns, nd)):
        return TensorStat(sub_name, numel, 0.0, math.inf, sampled)  # NaN/inf: unrelated
    cosine = dot / math.sqrt(nb * ns) if ns > 0 else 0.0
    return TensorStat(sub_name, numel, cosine, math.sqrt(nd / nb), sampled)


def _compare_weights(sub_dir: Path, base_dir: Path, tie: bool, report: IdentityReport) -> None:
    sub_files, base_files = _tensor_files(sub_dir), _tensor_files(base_dir)
    pairs = {n: n for n in set(sub_files) & set(base_files)}
    # A tied-embedding base stores no lm_head; a submission saved untied compares its head
    # with the base's embedding it was tied to.
    if tie and "lm_head.weight" in sub_files and "lm_head.weight" not in base_files:
        for emb in ("model.embed_tokens.weight", "transformer.wte.weight"):
            if emb in base_files:
                pairs["lm_head.weight"] = emb
    missing = sorted(set(base_files) - set(sub_files))
    extra = sorted(set(sub_files) - set(base_files) - set(pairs))
    report.missing_tensors, report.extra_tensors = missing[:_MAX_LISTED], extra[:_MAX_LISTED]
    if missing or extra:
        report.reasons.append(
            f"tensor names differ from the base: {len(missing)} missing, {len(extra)} extra"
        )
    stats: list[TensorStat] = []
    with ExitStack() as stack:
        # _tensor_files opened every file already: opening them all up front fails no new way
        files = {*sub_files.values(), *base_files.values()}
        opened = {f: stack.enter_context(safe_open(f, framework="pt")) for f in files}
        for sub_name, base_name in sorted(pairs.items()):
            s, b = opened[sub_files[sub_name]], opened[base_files[base_name]]
            shape = list(s.get_slice(sub_name).get_shape())
            base_shape = list(b.get_slice(base_name).get_shape())
            if shape != base_shape:
                report.shape_mismatches.append(f"{sub_name}: {base_shape} -> {shape}")
                continue
            stats.append(_compare_tensor(s, sub_name, b, base_name, shape))
    if report.shape_mismatches:
        n = len(report.shape_mismatches)
        report.shape_mismatches = report.shape_mismatches[:_MAX_LISTED]
        report.reasons.append(f"{n} tensor(s) have other shapes than the base's")
    report.tensors = len(stats)
    _summarise(stats, report)


def _summarise(stats: list[TensorStat], report: IdentityReport) -> None:
    informative = [s for s in stats if s.cosine is not None]
    total = sum(s.numel for s in informative)
    report.informative_params = total
    if not informative:
        if stats:
            report.reasons.append(
                "no informative tensor to compare (every base tensor is constant)"
            )
        return
    cosines = [s.cosine for s in informative if s.cosine is not None]
    dists = [s.rel_l2 for s in informative if s.rel_l2 is not None and math.isfinite(s.rel_l2)]
    related = sum(s.numel for s in informative if (s.cosine or 0.0) >= MIN_COSINE)
    report.related_share = related / total if total else None
    report.median_cosine = statistics.median(cosines)
    report.min_cosine = min(cosines)
    report.median_rel_l2 = statistics.median(dists) if dists else None
    report.least_related = [
        (s.name, round(s.cosine or 0.0, 4))
        for s in sorted(informative, key=lambda s: s.cosine or 0.0)[:5]
    ]
    if report.related_share is not None and report.related_share < MIN_DERIVED_SHARE:
        report.reasons.append(
            f"{WEIGHTS_REASON}: {100 * report.related_share:.0f}% of parameters have"
            f" cosine >= {MIN_COSINE} with the base's (median cosine {report.median_cosine:.3f});"
            " a fine-tune keeps most of them"
        )


# -- entry point -------------------------------------------------------------------------------
def check_identity(submission_dir: Path, base_dir: Path) -> IdentityReport:
    """Compare the model in ``submission_dir`` with the base model in ``base_dir``.

    Both directories hold ``config.json`` and ``*.safetensors`` (the grading service checks
    the submission's first). Reads the weights tensor by tensor (large tensors sampled, see
    the module docstring), never both models whole. Edge cases:

    - a missing or unreadable ``config.json`` on either side is a reason (architecture
      unknown); tokenizers stored in different formats (one ``tokenizer.json``, the other a
      sentencepiece file only) are not compared (``tokenizer_same`` None, no reason);
    - tensors missing, extra or of another shape are reasons and are left out of the weight
      statistics; a tied-embedding base's embedding is compared with a submission's untied
      ``lm_head.weight``;
    - NaN or infinite weights count as unrelated;
    - any error while reading (a corrupt file) gives ``derived`` None with the error as the
      reason, rather than an exception: the check must never stop a submission's grading.
    """
    started = time.time()
    report = IdentityReport(derived=None)
    try:
        sub_cfg = _read_json(Path(submission_dir) / "config.json")
        base_cfg = _read_json(Path(base_dir) / "config.json")
        if sub_cfg is None or base_cfg is None:
            report.reasons.append("config.json missing or unreadable: architecture unknown")
        else:
            _compare_config(sub_cfg, base_cfg, report)
        sub_tok, base_tok = tokenizer_vocab_hash(submission_dir), tokenizer_vocab_hash(base_dir)
        report.tokenizer_hash, report.base_tokenizer_hash = sub_tok, base_tok
        same_kind = (sub_tok or "").split(":")[0] == (base_tok or "").split(":")[0]
        if sub_tok and base_tok and same_kind:
            report.tokenizer_same = sub_tok == base_tok
            if not report.tokenizer_same:
                report.reasons.append("tokenizer vocabulary differs from the base's")
        _compare_templates(Path(submission_dir), Path(base_dir), report)
        tie = bool((base_cfg or {}).get("tie_word_embeddings"))
        _compare_weights(Path(submission_dir), Path(base_dir), tie, report)
        report.derived = not report.reasons
    except Exception as err:  # a corrupt file must not stop grading: say so instead
        report.derived = None
        report.reasons.append(f"identity check failed: {type(err).__name__}: {err}"[:300])
    report.seconds = round(time.time() - started, 3)
    return report
