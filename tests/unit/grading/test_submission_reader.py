"""The submission reader against malformed and hostile input, on real files and directories.

Every malformed file (safetensors headers, configs, tokenizer files) must come out as a
:class:`SubmissionError` (a 4xx) while the submission is staged, never as another exception
(an HTTP 500 and a row stuck in ``evaluating``); paths are contained in the workspace's real
``output/`` whatever ``output`` points to; weights must be exactly what the config builds.
The named regressions come first, then hypothesis fuzzing of the whole reader.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from agent2rl.grading.submission import (
    SubmissionError,
    SubmissionLimits,
    precheck_submission,
    resolve_submission,
    stage_submission,
    submission_roots,
)
from agent2rl.models.weights import (
    DTYPE_SIZES,
    MalformedWeights,
    json_depth,
    loads_json,
    read_safetensors_header,
    weights_hash,
)

LIMITS = SubmissionLimits(max_bytes=64 * 2**20)


class Run:
    """A run directory as the harness lays it out: a secret ledger next to the workspace,
    the agent's ``workspace/output``, and the base model elsewhere."""

    def __init__(self, root: Path, base: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.output = self.workspace / "output"
        self.output.mkdir(parents=True)
        self.base = base
        self.ledger = root / "ledger.db"
        with sqlite3.connect(self.ledger) as db:
            db.execute("create table secret (answer text)")
        self._n = 0
        self.last_dest: Path | None = None

    def model(self, name: str = "v1") -> Path:
        dest = self.output / name
        shutil.copytree(self.base, dest)
        return dest

    def stage(self, model_path: str) -> Path:
        """What the grading service does with a ``model_path``; returns the staged copy."""
        model_dir = resolve_submission(model_path, self.workspace)
        precheck_submission(model_dir)
        self._n += 1
        dest = self.last_dest = self.root / "grading" / f"staged{self._n}"
        roots = submission_roots(self.workspace, self.base)
        return stage_submission(model_dir, dest, roots, LIMITS)


@pytest.fixture
def run(tmp_path: Path, tiny) -> Run:
    return Run(tmp_path / "run", tiny.path)


def _refused(run: Run, model_path: str, status: int, match: str) -> SubmissionError:
    with pytest.raises(SubmissionError) as info:
        run.stage(model_path)
    assert info.value.status == status, info.value
    assert match in str(info.value), info.value
    assert run.last_dest is None or not run.last_dest.exists(), "a refused copy is removed"
    return info.value


def _safetensors(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


# -- malformed weights: each named case of the issue ----------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"abc", "only 3 bytes"),
        (_safetensors({"w": {"dtype": "F32", "shape": [1]}}, b"\0" * 4), "data_offsets"),
        (_safetensors([1, 2, 3]), "JSON object"),
        (_safetensors(b"[" * 50_000 + b"]" * 50_000), "JSON object"),
        (_safetensors(b'{"a":' * 50_000 + b"1" + b"}" * 50_000), "nests deeper"),
        (
            _safetensors({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b"\0" * 4),
            "0 <= start <= end",
        ),
        (_safetensors({}, length=2**64 - 1), "too large"),
        (_safetensors({}, length=10_000), "past the end"),
        (
            _safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
            "needs 8 bytes",
        ),
        (
            _safetensors(
                {
                    "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                },
                b"\0" * 4,
            ),
            "overlaps",
        ),
        (_safetensors(b'{"a": {}, "a": {}}'), "duplicate key"),
        (_safetensors({"w": {"dtype": "Q9", "shape": [], "data_offsets": [0, 0]}}), "dtype"),
    ],
    ids=[
        "3-byte-file",
        "no-data_offsets",
        "list-header",
        "deep-list-header",
        "deep-object-header",
        "negative-offsets",
        "huge-length",
        "length-past-end",
        "size-mismatch",
        "overlap",
        "duplicate-names",
        "unknown-dtype",
    ],
)
def test_malformed_weights_are_refused_when_staged(run: Run, content: bytes, match: str) -> None:
    """Each one escaped the old handler as struct.error, KeyError, TypeError,
    RecursionError or a negative seek: a 500 and a row stuck in ``evaluating``."""
    (run.model() / "model.safetensors").write_bytes(content)
    err = _refused(run, "output/v1", 400, "malformed weights")
    assert match in str(err)
    with pytest.raises(MalformedWeights, match=match.split()[0]):
        weights_hash(run.output / "v1")  # defence in depth: only ValueError


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json"])
def test_deeply_nested_json_is_refused(run: Run, name: str) -> None:
    (run.model() / name).write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    _refused(run, "output/v1", 400, "nests deeper")


def test_json_that_is_not_an_object_or_not_json_is_refused(run: Run) -> None:
    model = run.model()
    (model / "config.json").write_text("[1, 2]")
    _refused(run, "output/v1", 400, "must be a JSON object")
    (model / "config.json").write_bytes(b"\xff\xfe{")
    _refused(run, "output/v1", 400, "not valid JSON")
    (model / "config.json").write_text('{"n": ' + "9" * 5000 + "}")  # over Python's int limit
    _refused(run, "output/v1", 400, "not valid JSON")


def test_tokenizer_json_the_tokenizers_library_cannot_read_is_refused(run: Run) -> None:
    tok = run.model() / "tokenizer.json"
    data = json.loads(tok.read_text())
    data["model"]["vocab"] = {"a": "not an id"}
    tok.write_text(json.dumps(data))
    _refused(run, "output/v1", 400, "tokenizer.json cannot be read by the tokenizers library")


def test_json_depth_ignores_brackets_in_strings() -> None:
    assert json_depth(b'[["]]]\\\\", {"a\\"[[[": [1]}]]') == 4
    assert loads_json(b'{"a": ["[[[", "\\"{"]}', "x") == {"a": ["[[[", '"{']}
    with pytest.raises(ValueError, match="deeper"):
        loads_json(b"[" * 65 + b"]" * 65, "x")


# -- weights must match the config exactly ---------------------------------------------------


def _edit_config(model: Path, **changes: object) -> None:
    cfg = json.loads((model / "config.json").read_text())
    cfg.update(changes)
    (model / "config.json").write_text(json.dumps(cfg))


def test_config_with_more_layers_than_the_weights_is_refused(run: Run) -> None:
    """num_hidden_layers = 200 over 4 layers of weights loaded 196 random layers."""
    _edit_config(run.model(), num_hidden_layers=200)
    err = _refused(run, "output/v1", 400, "num_hidden_layers = 200")
    assert "38 tensors" in str(err)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"num_hidden_layers": 8}, "missing model.layers.4."),
        ({"num_hidden_layers": 3}, "not in the architecture model.layers.3."),
        ({"hidden_size": 64}, "shapes differ"),
        ({"tie_word_embeddings": False}, "missing lm_head.weight"),
        ({"model_type": "no-such-model"}, "does not describe a causal LM"),
        ({"model_type": None}, "no model_type"),
        ({"num_attention_heads": 0}, "does not describe a causal LM"),
    ],
)
def test_weights_that_do_not_match_the_config_are_refused(
    run: Run, changes: dict, match: str
) -> None:
    _edit_config(run.model(), **changes)
    _refused(run, "output/v1", 400, match)


def test_valid_models_stage_single_sharded_and_linked(run: Run, tiny) -> None:
    from transformers import AutoModelForCausalLM

    staged = run.stage(str(run.model("v1").relative_to(run.workspace)))
    assert weights_hash(staged) == tiny.weights_hash  # lm_head tied: absent, and fine

    sharded = run.output / "sharded"
    model = AutoModelForCausalLM.from_pretrained(tiny.path)
    model.save_pretrained(sharded, max_shard_size="1MB")
    for f in ("tokenizer.json", "tokenizer_config.json"):  # agents link the base tokenizer
        (sharded / f).symlink_to(tiny.path / f)
    assert len(list(sharded.glob("*.safetensors"))) > 1
    staged = run.stage("output/sharded")
    assert weights_hash(staged) == tiny.weights_hash
    assert (staged / "tokenizer.json").read_bytes() == (tiny.path / "tokenizer.json").read_bytes()

    # A shard the index does not name would not be loaded: refused.
    shutil.copy(tiny.path / "model.safetensors", sharded / "stray.safetensors")
    _refused(run, "output/sharded", 400, "stray.safetensors")


# -- paths: containment in the workspace's real output/ ------------------------------------


def _ledger_leak(run: Run, model: Path) -> None:
    tok = model / "tokenizer.json"
    tok.unlink()
    tok.symlink_to(run.ledger)


def test_output_symlinked_to_the_run_directory_is_refused(run: Run) -> None:
    """``output -> ..``: the containment root became the run directory, and a submission
    under workspace/ staged the run's ledger.db through a tokenizer symlink."""
    model = run.workspace / "code" / "sub"
    model.parent.mkdir()
    shutil.copytree(run.base, model)
    _ledger_leak(run, model)
    run.output.rmdir()
    run.output.symlink_to("..")
    err = _refused(run, "output/workspace/code/sub", 403, "output/ is not a plain directory")
    assert "symlink" in str(err)
    with pytest.raises(SubmissionError, match="not a plain directory"):
        submission_roots(run.workspace, run.base)


def test_output_symlinked_to_the_host_root_is_refused(run: Run) -> None:
    """``output -> /``: any directory the grader can read was inside output/."""
    run.output.rmdir()
    run.output.symlink_to("/")
    for path in ("output/etc", "output/" + str(run.base).lstrip("/"), str(run.base)):
        with pytest.raises(SubmissionError) as info:
            resolve_submission(path, run.workspace)
        assert info.value.status == 403, (path, info.value)


def test_output_swapped_for_a_symlink_after_resolving_is_not_followed(run: Run) -> None:
    """The check and the copy are separate steps: an ``output`` replaced by a link between
    them fails the copy instead of widening what it may read."""
    model = run.model()
    _ledger_leak(run, model)
    (model / "tokenizer.json").unlink()
    model_dir = resolve_submission("output/v1", run.workspace)
    roots = submission_roots(run.workspace, run.base)
    real = run.workspace / "real-output"
    run.output.rename(real)
    run.output.symlink_to(real)
    with pytest.raises(SubmissionError, match="changed while it was being read"):
        stage_submission(model_dir, run.root / "grading" / "x", roots, LIMITS)
    assert not (run.root / "grading" / "x").exists()


@pytest.mark.parametrize("target", ["..", "/", "."])
def test_roots_computed_while_output_was_a_symlink_do_not_widen_the_copy(
    run: Run, target: str
) -> None:
    """A caller computing the output root as ``(workspace / "output").resolve()`` at the
    moment ``output`` was swapped for a link (and swapped back before the copy) got the
    run directory, ``/`` or the workspace as root: a tokenizer symlink to the ledger was
    then inside it."""
    model = run.model()
    _ledger_leak(run, model)
    model_dir = resolve_submission("output/v1", run.workspace)
    real = run.workspace / "real-output"
    run.output.rename(real)
    run.output.symlink_to(target)
    widened = [(run.workspace / "output").resolve(), run.base.resolve()]
    run.output.unlink()
    real.rename(run.output)
    assert model_dir.is_relative_to(widened[0]) and widened[0] != run.output
    with pytest.raises(SubmissionError, match="links outside") as info:
        stage_submission(model_dir, run.root / "grading" / "x", widened, LIMITS)
    assert info.value.status == 403
    # output pointed somewhere not holding the model: the copy is refused outright.
    elsewhere = [run.root / "grading", run.base.resolve()]
    with pytest.raises(SubmissionError, match="changed while it was being read"):
        stage_submission(model_dir, run.root / "grading" / "y", elsewhere, LIMITS)


def test_absolute_paths_outside_do_not_reveal_whether_they_exist(run: Run, tmp_path) -> None:
    exists, missing = tmp_path / "elsewhere", tmp_path / "no-such-dir"
    exists.mkdir()
    answers = set()
    for path in (exists, missing, exists / "sub", Path("/etc"), Path("/no/such/path")):
        with pytest.raises(SubmissionError) as info:
            resolve_submission(str(path), run.workspace)
        answers.add((info.value.status, str(info.value).replace(repr(str(path)), "<p>")))
    assert len(answers) == 1, answers
    assert answers.pop()[0] == 403
    # A symlink inside output/ to a host path: the same answer, existing or not.
    (run.output / "a").symlink_to(exists)
    (run.output / "b").symlink_to(missing)
    for link in ("output/a", "output/b"):
        with pytest.raises(SubmissionError) as info:
            resolve_submission(link, run.workspace)
        assert info.value.status == 403 and "outside output/" in str(info.value)


def test_paths_inside_output_resolve(run: Run) -> None:
    run.model("v1")
    (run.output / "latest").symlink_to("v1")
    (run.output / "abs").symlink_to(run.output / "v1")
    real = Path(os.path.realpath(run.output)) / "v1"
    for path in ("output/v1", "./output/v1/", "output/latest", "output/abs", str(real)):
        assert resolve_submission(path, run.workspace) == real, path
    (run.output / "loop").symlink_to("loop")
    with pytest.raises(SubmissionError, match="symlinks"):
        resolve_submission("output/loop", run.workspace)
    for path, status in (("output", 403), ("output/..", 403), ("output/nope", 404)):
        with pytest.raises(SubmissionError) as info:
            resolve_submission(path, run.workspace)
        assert info.value.status == status, path


# -- fuzzing ---------------------------------------------------------------------------------

#: AGENT2RL_FUZZ_EXAMPLES=5000 explores further (random examples) than the fixed default.
_EXAMPLES = int(os.environ.get("AGENT2RL_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_EXAMPLES or 60,
    deadline=None,
    derandomize=not _EXAMPLES,  # by default the same examples every run: failures reproduce
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)
deep_nesting = st.integers(60, 20_000).flatmap(
    lambda n: st.sampled_from(
        [b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n, b"[" * n, b'{"a": [' * n]
    )
)
tensor_entry = (
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from([*DTYPE_SIZES, "F4", "f32", ""]) | json_leaf,
            "shape": st.lists(st.integers(-2, 6), max_size=3) | json_value,
            "data_offsets": st.lists(st.integers(-10, 2**64 + 5), max_size=3) | json_value,
        },
        optional={"extra": json_value},
    )
    | json_value
)
header_object = st.dictionaries(
    st.sampled_from(["__metadata__", "lm_head.weight", "model.norm.weight"]) | st.text(max_size=10),
    tensor_entry,
    max_size=4,
)


@st.composite
def well_formed_weights(draw) -> bytes:
    """A valid safetensors file of random tensors (it fails the config check, not the
    header check)."""
    tensors, data = {}, b""
    for name in draw(st.lists(st.text(min_size=1, max_size=8), max_size=4, unique=True)):
        dtype = draw(st.sampled_from(sorted(DTYPE_SIZES)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        size = DTYPE_SIZES[dtype] * math.prod(shape)
        tensors[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + size],
        }
        data += b"\0" * size
    return _safetensors(tensors, data)


@st.composite
def safetensors_files(draw) -> bytes:
    kind = draw(st.sampled_from(["object", "any-json", "deep", "bytes", "valid"]))
    if kind == "valid":
        content = draw(well_formed_weights())
    elif kind == "bytes":
        return draw(st.binary(max_size=64))
    else:
        header = {
            "object": header_object,
            "any-json": json_value,
            "deep": deep_nesting,
        }[kind]
        raw = draw(header)
        raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
        length = draw(
            st.one_of(st.just(len(raw)), st.integers(0, 2**64 - 1), st.integers(0, len(raw) + 8))
        )
        content = struct.pack("<Q", length) + raw + draw(st.binary(max_size=32))
    cut = draw(st.none() | st.integers(0, len(content)))  # a truncated copy
    return content if cut is None else content[:cut]


@pytest.fixture
def fuzz_run(tmp_path_factory, tiny) -> Run:
    return Run(tmp_path_factory.mktemp("fuzz") / "run", tiny.path)


def _stage_or_refuse(run: Run, files: dict[str, bytes]) -> None:
    """Stage a copy of the base model with ``files`` replaced: it either stages or is
    refused with a SubmissionError (4xx); nothing else may come out, and a refusal leaves
    no copy behind."""
    name = f"m{run._n}"
    model = run.model(name)
    for f, content in files.items():
        (model / f).write_bytes(content)
    try:
        staged = run.stage(f"output/{name}")
    except SubmissionError as err:
        event(f"refused {err.status}")
        assert 400 <= err.status < 500
        assert run.last_dest is None or not run.last_dest.exists()
    else:
        event("staged")
        weights_hash(staged)  # a staged copy always hashes
        shutil.rmtree(staged)
    shutil.rmtree(model)


def _with_metadata(path: Path, metadata: dict[str, str]) -> bytes:
    """The safetensors file ``path`` with its ``__metadata__`` replaced: the same tensors."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header["__metadata__"] = metadata
    return _safetensors(header, raw[8 + n :])


@settings(FUZZ, max_examples=_EXAMPLES or 15)  # each example stages a whole model
@given(
    metadata=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    padding=st.integers(0, 16),
)
def test_fuzz_valid_weights_still_stage(fuzz_run: Run, tiny, metadata, padding) -> None:
    content = _with_metadata(tiny.path / "model.safetensors", metadata)
    (n,) = struct.unpack("<Q", content[:8])  # a header padded with spaces is valid too
    content = (
        struct.pack("<Q", n + padding) + content[8 : 8 + n] + b" " * padding + content[8 + n :]
    )
    name = f"m{fuzz_run._n}"
    (fuzz_run.model(name) / "model.safetensors").write_bytes(content)
    assert weights_hash(fuzz_run.stage(f"output/{name}")) == tiny.weights_hash


@FUZZ
@given(content=safetensors_files())
@example(content=b"abc")
@example(content=_safetensors({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}))
def test_fuzz_safetensors_headers(fuzz_run: Run, content: bytes) -> None:
    _stage_or_refuse(fuzz_run, {"model.safetensors": content})
    # The reader and the hash on their own: MalformedWeights (a ValueError) or an answer.
    folder = fuzz_run.root / "raw"
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(content)
    for read in (read_safetensors_header, lambda p: weights_hash(p.parent)):
        try:
            read(folder / "model.safetensors")
        except MalformedWeights:
            pass


config_edits = st.dictionaries(
    st.sampled_from(
        [
            "num_hidden_layers",
            "hidden_size",
            "vocab_size",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "max_position_embeddings",
            "tie_word_embeddings",
            "model_type",
            "rope_scaling",
            "rope_theta",
            "torch_dtype",
            "architectures",
            "head_dim",
            "pad_token_id",
        ]
    )
    | st.text(max_size=8),
    json_value | st.integers(-(2**64), 2**64) | st.sampled_from(["llama", "gpt2", "qwen2", "bert"]),
    max_size=3,
)


@st.composite
def config_files(draw) -> dict | bytes:
    """Edits merged into the base model's config (a dict), or a whole file (bytes)."""
    kind = draw(st.sampled_from(["edit", "edit", "any-json", "deep", "bytes"]))
    if kind == "edit":
        return draw(config_edits)
    if kind == "deep":
        return draw(deep_nesting)
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    return json.dumps(draw(json_value)).encode()


@FUZZ
@given(content=config_files())
def test_fuzz_config(fuzz_run: Run, tiny, content: dict | bytes) -> None:
    if isinstance(content, dict):
        base = json.loads((tiny.path / "config.json").read_text())
        content = json.dumps({**base, **content}).encode()
    _stage_or_refuse(fuzz_run, {"config.json": content})


@FUZZ
@given(
    name=st.sampled_from(
        ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "vocab.json"]
    ),
    content=st.one_of(
        st.binary(max_size=64),
        deep_nesting,
        json_value.map(lambda v: json.dumps(v).encode()),
    ),
)
def test_fuzz_tokenizer_and_other_json_files(fuzz_run: Run, name: str, content: bytes) -> None:
    _stage_or_refuse(fuzz_run, {name: content})


@st.composite
def tokenizer_field_edits(draw) -> list[tuple[tuple[str, ...], object]]:
    """Edits of the real tokenizer.json: a field (top level or of its model) set to any
    JSON value."""
    fields = st.sampled_from(
        [
            ("added_tokens",),
            ("normalizer",),
            ("pre_tokenizer",),
            ("post_processor",),
            ("decoder",),
            ("truncation",),
            ("padding",),
            ("model",),
            ("model", "type"),
            ("model", "vocab"),
            ("model", "merges"),
            ("model", "unk_token"),
            ("model", "dropout"),
        ]
    )
    return draw(st.lists(st.tuples(fields, json_value), min_size=1, max_size=3))


@FUZZ
@given(edits=tokenizer_field_edits())
def test_fuzz_tokenizer_json_fields(fuzz_run: Run, tiny, edits) -> None:
    data = json.loads((tiny.path / "tokenizer.json").read_text())
    for path, value in edits:
        target = data
        for key in path[:-1]:
            target = target[key] if isinstance(target.get(key), dict) else {}
        target[path[-1]] = value
    _stage_or_refuse(fuzz_run, {"tokenizer.json": json.dumps(data).encode()})
