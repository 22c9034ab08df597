"""A submission's tokenizer, held to the chat template's rule: it may not read the prompt.

A ``tokenizer.json`` is code too. Its normaliser and pre-tokeniser run on every graded prompt
before the model sees it, its decoder on every completion before the scorer does: a normaliser
``Replace(Regex("apples\\."), "apples. Hint: add the numbers.")`` rewrites a question, a
decoder ``Replace("The answer is", "####")`` rewrites an answer into the scorer's format. So
the four sections of the pipeline (:data:`PIPELINE`: ``normalizer``, ``pre_tokenizer``,
``post_processor``, ``decoder``) must be the base model's, compared as the tokenizers library
loads them (``backend_tokenizer.to_str()`` of the tokenizer transformers builds, so that two
spellings of one pipeline compare equal). The vocabulary, the merges and ``added_tokens`` may
differ (fine-tuning adds tokens).

Where a section differs, it must be proven harmless on what is graded, as the chat template is
(:mod:`agent2rl.inference.chat_template`): every graded prompt, and a random stand-in for it
(the same characters by class, letters and digits redrawn), must be encoded to the same token
ids by the submission's tokenizer as by the *reference*: the submission's own tokenizer with
the differing sections replaced by the base's. Same ids means the model sees exactly what the
base's pipeline would have given it, whatever the sections say. The decoder is the exception:
it acts on the completions, whose token ids this check never sees (the backends decode them),
so a decoder other than the base's is refused outright. Either refusal is
:class:`TokenizerRefused`, a :class:`~agent2rl.errors.ModelFault`: the evaluation fails as the
model's fault, with one message whatever prompt failed (:data:`REFUSED`), so that the failure
says nothing about which private prompt triggered it. Every prompt of a call is checked before
any is generated, so the time of the failure says nothing either.

The comparison is made while staging (:func:`inspect_tokenizer`, in a child process: loading an
untrusted tokenizer runs native parsers, sentencepiece's among them, which may abort): it also
refuses a tokenizer that transformers cannot load (malformed ``merges.txt``, ``vocab.*``,
``*.model``) or whose chat template does not parse, so those are a 400 at submission rather
than a failure at evaluation. It writes :data:`REFERENCE_FILE` next to the private copy, and the
evaluation worker reads it (:meth:`TokenizerCheck.of`): no file, nothing to check (the baseline,
``agent2rl eval`` of a trusted model).

Edge cases: a submission without ``tokenizer.json`` is loaded from its slow files by
transformers' own converters (trusted code, same for every input) and compared like any other.
Settings of ``tokenizer_config.json`` that transformers applies to the pipeline
(``add_prefix_space``) are part of what is compared, since the loaded tokenizer is. A slow
tokenizer (no ``backend_tokenizer``) has no sections to compare and is not checked here.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent2rl.child_process import die_with_parent
from agent2rl.errors import ModelFault
from agent2rl.inference.chat_template import one_line

#: The sections of ``tokenizer.json`` that run on text, in the order they run.
PIPELINE = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
#: Written next to a staged copy (``grading/submissions/<id>/``): the base's sections and which
#: of the submission's differ.
REFERENCE_FILE = "tokenizer_reference.json"
#: The one message of a refusal, whatever prompt or section failed.
REFUSED = (
    "the submission's tokenizer does not tokenize the graded text as the base model's does: "
    "its normalizer, pre_tokenizer, post_processor or decoder (tokenizer.json) differ from "
    "the base model's in behaviour; copy those four sections from the base model's "
    "tokenizer.json (the vocabulary and added_tokens may differ)"
)
#: Seconds a staging child may take to load the two tokenizers.
INSPECT_TIMEOUT_S = 300.0

#: What :func:`stand_in` redraws a character from: the ASCII class it belongs to.
_REDRAWN = (string.digits, string.ascii_lowercase, string.ascii_uppercase)

_CHILD = "import sys; from agent2rl.inference.tokenizer_check import _inspect; sys.exit(_inspect())"


class TokenizerRefused(ModelFault):
    """The submission's tokenizer pipeline is not the base's and does not behave as the base's
    on a graded prompt (or its decoder differs). Its message is always :data:`REFUSED`."""

    def __init__(self) -> None:
        super().__init__(REFUSED)


class TokenizerUnloadable(Exception):
    """The submitted tokenizer files cannot be loaded by transformers, or their chat template
    does not parse; the message names the problem (from the files alone, never a prompt)."""


def pipeline(tokenizer: Any) -> dict[str, Any] | None:
    """The :data:`PIPELINE` sections of a loaded transformers tokenizer, as the tokenizers
    library serialises them; None for a slow tokenizer (no ``backend_tokenizer``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    data = json.loads(backend.to_str())
    return {k: data.get(k) for k in PIPELINE}


def _load(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)


def _check_template_syntax(tokenizer: Any) -> None:
    """Parse (never render) every chat template the tokenizer has, as transformers compiles
    them: a syntax error depends on the template's source alone."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    templates = getattr(tokenizer, "chat_template", None)
    if not templates:
        return
    named = templates if isinstance(templates, dict) else {"default": templates}
    for name, source in named.items():
        if not isinstance(source, str):
            raise TokenizerUnloadable(f"chat template {name!r} is not a string")
        try:
            _compile_jinja_template(source)
        except Exception as err:  # noqa: BLE001 - jinja's syntax and parser errors
            raise TokenizerUnloadable(
                f"the chat template does not parse ({one_line(err)})"
            ) from None


def compare(sub_dir: Path, base_dir: Path) -> dict[str, Any]:
    """Load ``sub_dir``'s tokenizer (raising :class:`TokenizerUnloadable` when transformers
    cannot, or its chat template does not parse) and compare its pipeline with
    ``base_dir``'s: ``{"differ": [sections], "base": {section: base's JSON}}``. In-process:
    :func:`inspect_tokenizer` runs it in a child."""
    try:
        sub = _load(sub_dir)
    except BaseException as err:  # a Rust panic is a BaseException: the files' fault too
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        # Without the grader's own path to the copy (transformers names the file it failed on)
        message = one_line(err).replace(f"{os.path.abspath(sub_dir)}/", "")
        raise TokenizerUnloadable(f"transformers cannot load the tokenizer ({message})") from None
    _check_template_syntax(sub)
    base = pipeline(_load(base_dir))
    mine = pipeline(sub)
    differ = [] if base is None or mine is None else [k for k in PIPELINE if mine[k] != base[k]]
    return {"differ": differ, "base": base}


def inspect_tokenizer(
    sub_dir: Path, base_dir: Path, timeout_s: float = INSPECT_TIMEOUT_S
) -> dict[str, Any]:
    """:func:`compare` in a child process (``python -P``, ``cwd=/``, offline, dies with its
    parent). Raises :class:`TokenizerUnloadable` when the files are at fault (the child
    refused them, crashed or aborted on them, or took over ``timeout_s``), ``RuntimeError``
    when the child could not start."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    request = json.dumps({"model": os.path.abspath(sub_dir), "base": os.path.abspath(base_dir)})
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", _CHILD],
            input=request.encode(),
            capture_output=True,
            cwd="/",
            env=env,
            timeout=timeout_s,
            preexec_fn=die_with_parent,
        )
    except subprocess.TimeoutExpired:
        raise TokenizerUnloadable(f"loading the tokenizer took more than {timeout_s:g} s") from None
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        if done.returncode < 0:  # killed by a signal: a native parser aborted on the files
            raise TokenizerUnloadable(f"loading the tokenizer crashed (signal {-done.returncode})")
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"the tokenizer check did not answer (exit {done.returncode}): {tail}")
    if "error" in reply:
        raise TokenizerUnloadable(str(reply["error"]))
    return reply


def _inspect() -> int:
    """The staging child: a JSON request on stdin, one JSON line on stdout."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else is printed goes to stderr, not into the reply
    req = json.loads(sys.stdin.read())
    try:
        reply: dict[str, Any] = compare(Path(req["model"]), Path(req["base"]))
    except TokenizerUnloadable as err:
        reply = {"error": str(err)}
    proto.write(json.dumps(reply) + "\n")
    proto.flush()
    return 0


def write_reference(dest: Path, reference: dict[str, Any]) -> None:
    """Store ``reference`` (from :func:`inspect_tokenizer`) as ``dest/REFERENCE_FILE``."""
    from agent2rl.files import write_json_atomic

    write_json_atomic(dest / REFERENCE_FILE, reference)


def stand_in(text: str, rng: random.Random) -> str:
    """``text`` with every letter and digit redrawn at random (case and class kept), all
    else (spaces, punctuation, markup) as it is: text of the same shape, none of its content."""
    return "".join(next((rng.choice(p) for p in _REDRAWN if c in p), c) for c in text)


class TokenizerCheck:
    """The check of one submission's tokenizer on the prompts it is graded on (see the
    module's docstring). Build it with :meth:`of`; :meth:`check` raises
    :class:`TokenizerRefused`."""

    def __init__(self, tokenizer: Any, reference: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        differ = [k for k in reference.get("differ") or [] if k in PIPELINE]
        self.decoder_differs = "decoder" in differ
        data = json.loads(tokenizer.backend_tokenizer.to_str())
        self._sub = Tokenizer.from_str(json.dumps(data))
        for k in differ:
            data[k] = (reference.get("base") or {}).get(k)
        self._ref = Tokenizer.from_str(json.dumps(data))
        for t in (self._sub, self._ref):
            t.no_padding()
            t.no_truncation()
        self._rng = random.Random()

    @classmethod
    def of(cls, model_dir: Path, tokenizer: Any = None) -> TokenizerCheck | None:
        """The check for the staged copy ``model_dir``: None when staging wrote no
        :data:`REFERENCE_FILE` next to it or found the pipeline to be the base's. ``tokenizer``:
        the submission's loaded tokenizer (loaded from ``model_dir`` when not given)."""
        path = Path(model_dir).parent / REFERENCE_FILE
        if not path.is_file():
            return None
        reference = json.loads(path.read_text())
        if not reference.get("differ"):
            return None
        if tokenizer is None or getattr(tokenizer, "backend_tokenizer", None) is None:
            tokenizer = _load(Path(model_dir))
        return cls(tokenizer, reference)

    def check(self, prompts: Sequence[str]) -> None:
        """Raise :class:`TokenizerRefused` unless each prompt, and a stand-in for it, encodes
        to the same ids (with and without special tokens) under the submission's tokenizer as
        under the reference; always when the decoder differs."""
        if self.decoder_differs:
            raise TokenizerRefused()
        texts = [t for p in prompts for t in (p, stand_in(p, self._rng))]
        for special in (False, True):
            mine = self._sub.encode_batch(texts, add_special_tokens=special)
            base = self._ref.encode_batch(texts, add_special_tokens=special)
            if any(a.ids != b.ids for a, b in zip(mine, base, strict=True)):
                raise TokenizerRefused()
