"""Over real HTTP, through the grading service and its evaluation worker: a submission's
tokenizer and chat template are code that may not read the graded prompt (issue #38).

A normaliser that rewrites the prompt, a decoder that rewrites the answer and a chat template
that computes the answer each fail as the model's fault, with one message that names neither
the prompt nor the rule; malformed tokenizer files are refused while staging (a 400, a
rejection, no row); an oversized body and an oversized (sparse) weights file get a clean 413.
The behaviour check itself (what passes: a differently spelled but equivalent pipeline, added
tokens) is tested on the real graded prompts without HTTP at the end."""

from __future__ import annotations

import json
import shutil
import socket

import httpx
import pytest
from support import FIXTURES
from support.rundirs import make_run, serve
from tokenizers import Regex, Tokenizer, decoders, normalizers

from agent2rl.grading.ledger import Ledger
from agent2rl.inference.chat_template import FAILED
from agent2rl.inference.tokenizer_check import (
    REFUSED,
    TokenizerCheck,
    TokenizerRefused,
    compare,
    write_reference,
)
from agent2rl.sandbox.network import ServiceBridge

pytestmark = pytest.mark.slow  # a grading service and its evaluation workers


@pytest.fixture(scope="module")
def service(tmp_path_factory, arith, tiny):
    task, prepared = arith
    paths = make_run(tmp_path_factory.mktemp("tok") / "run", task, prepared, tiny)
    handle, token = serve(paths, tiny.path, max_bytes=12 * 2**20)
    client = httpx.Client(
        base_url=handle.url, timeout=300, headers={"Authorization": f"Bearer {token}"}
    )
    yield paths, client, handle
    client.close()
    handle.stop()


def _copy(paths, tiny, name: str):
    return shutil.copytree(tiny.path, paths.output / name)


def _with_tokenizer(model, change) -> None:
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    change(tok)
    tok.save(str(model / "tokenizer.json"))


def _rows(paths) -> tuple[list, int]:
    with Ledger(paths.ledger) as ledger:
        return ledger.submissions(), len(ledger.rejections())


def _failed_as_model(service, name: str) -> dict:
    paths, client, _ = service
    r = client.post("/submit", json={"model_path": f"output/{name}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "failed" and body["failure_kind"] == "model", body
    return body


def test_a_normaliser_that_rewrites_the_prompt_fails_as_the_models_fault(service, tiny) -> None:
    paths = service[0]
    model = _copy(paths, tiny, "normaliser")

    def hint(tok) -> None:
        tok.normalizer = normalizers.Replace(
            Regex(r"\nAnswer:"), " Hint: add the two numbers.\nAnswer:"
        )

    _with_tokenizer(model, hint)
    body = _failed_as_model(service, "normaliser")
    assert body["error"] == f"evaluation failed: TokenizerRefused: {REFUSED}"
    assert "Hint" not in body["error"] and "Answer" not in body["error"]


def test_a_decoder_that_rewrites_the_answer_fails_as_the_models_fault(service, tiny) -> None:
    paths = service[0]
    model = _copy(paths, tiny, "decoder")

    def answer_format(tok) -> None:
        tok.decoder = decoders.Sequence([tok.decoder, decoders.Replace("The answer is", "####")])

    _with_tokenizer(model, answer_format)
    body = _failed_as_model(service, "decoder")
    assert body["error"] == f"evaluation failed: TokenizerRefused: {REFUSED}"


def test_a_chat_template_that_reads_the_question_fails_with_one_reason(service, tiny) -> None:
    paths = service[0]
    model = _copy(paths, tiny, "template")
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cheat = (FIXTURES / "chat_templates" / "cheat-arithmetic-hint.jinja").read_text()
    (model / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": cheat}))
    body = _failed_as_model(service, "template")
    assert body["error"] == f"evaluation failed: ChatTemplateRefused: {FAILED}"
    # One reason whatever prompt failed: no message number, role, count or length.
    for leak in ("message 1", "(user)", "repeated", "Hint", "characters"):
        assert leak not in body["error"], body["error"]
    # No per-submission timing to the agent finer than a minute.
    assert body["eval_seconds"] is not None and body["eval_seconds"] % 60 == 0


@pytest.mark.parametrize(
    ("name", "files", "match"),
    [
        # A tokenizer built from vocab.json and merges.txt (no tokenizer.json): bad merges.
        (
            "merges",
            {"vocab.json": '{"a": 0, "b": 1}', "merges.txt": "#version: 0.2\nx\n"},
            "Merges text file invalid",
        ),
        # A sentencepiece tokenizer whose model file is not one.
        ("spm", {"tokenizer.model": "\x96\x15not a sentencepiece model"}, "tokenizer.model"),
        ("jinja", {"chat_template.jinja": "{% for m in messages %}{{ m.content }"}, "parse"),
    ],
    ids=["merges", "spm", "jinja"],
)
def test_malformed_tokenizer_files_are_refused_while_staging(service, tiny, name, files, match):
    paths, client, _ = service
    model = _copy(paths, tiny, f"malformed-{name}")
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    if name == "merges":
        (model / "tokenizer.json").unlink()
        cfg["tokenizer_class"] = "GPT2Tokenizer"
    elif name == "spm":
        (model / "tokenizer.json").unlink()
        cfg["tokenizer_class"] = "LlamaTokenizer"
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    for file, text in files.items():
        (model / file).write_text(text)
    before, rejections = _rows(paths)
    r = client.post("/submit", json={"model_path": f"output/malformed-{name}"})
    assert r.status_code == 400, r.text
    assert "tokenizer files are malformed" in r.json()["error"] and match in r.json()["error"]
    assert str(paths.root) not in r.json()["error"]  # not the grader's own paths
    after, rejections_after = _rows(paths)
    assert [s.id for s in after] == [s.id for s in before], "no row, evaluating or other"
    assert rejections_after == rejections + 1


def _post_whole(sock: socket.socket, body: bytes) -> bytes:
    """Send a POST of ``body`` to /submit the way ``http.client`` and curl do (the whole body
    before reading anything), then read the answer to its end."""
    head = (
        "POST /submit HTTP/1.1\r\nHost: grader\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    answer = b""
    while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
        answer += chunk
    header, _, rest = answer.partition(b"\r\n\r\n")
    length = next(
        (
            int(v)
            for k, _, v in (h.partition(b":") for h in header.split(b"\r\n"))
            if k.strip().lower() == b"content-length"
        ),
        0,
    )
    while len(rest) < length and (chunk := sock.recv(65536)):
        rest += chunk
    return header + b"\r\n\r\n" + rest


def test_a_50_mb_body_gets_a_clean_413(service, tmp_path) -> None:
    """Directly and through the sandbox's service bridge (how a sandboxed agent reaches the
    grader): a client that sends its whole body before reading gets the 413 JSON, not a
    connection dropped under it while it is still sending."""
    paths, client, handle = service
    _, rejections = _rows(paths)
    url = httpx.URL(handle.url)
    body = b"x" * (50 * 2**20)
    with socket.create_connection((url.host, url.port), timeout=60) as direct:
        answers = [_post_whole(direct, body)]
    with ServiceBridge(tmp_path / "net", [url.port]) as bridge:
        with socket.socket(socket.AF_UNIX) as bridged:
            bridged.settimeout(60)
            bridged.connect(str(bridge.socket_path(url.port)))
            answers.append(_post_whole(bridged, body))
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"request body over" in answer.partition(b"\r\n\r\n")[2]
    assert _rows(paths)[1] == rejections + 2
    assert client.get("/health").status_code == 200


def test_a_200_gb_sparse_weights_file_is_refused_by_the_size_limit(service, tiny) -> None:
    paths, client, _ = service
    model = _copy(paths, tiny, "sparse")
    with (model / "model.safetensors").open("r+b") as f:
        f.truncate(200 * 2**30)  # sparse: no disk used
    before, _ = _rows(paths)
    r = client.post("/submit", json={"model_path": "output/sparse"})
    assert r.status_code == 413, r.text
    assert "size limit of 12 MiB" in r.json()["error"]
    assert [s.id for s in _rows(paths)[0]] == [s.id for s in before]


# -- the behaviour check on the graded prompts, without HTTP ---------------------------------


@pytest.fixture(scope="module")
def graded_prompts(arith) -> list[str]:
    from agent2rl.tasks.arith_lite import FORMAT

    task, prepared = arith
    return [FORMAT.template.format(**s.input) for s in task.samples(prepared, "private")]


def _check(tiny, tmp_path, change) -> TokenizerCheck | None:
    from transformers import AutoTokenizer

    model = shutil.copytree(tiny.path, tmp_path / "model")
    _with_tokenizer(model, change)
    write_reference(tmp_path, compare(model, tiny.path))
    return TokenizerCheck.of(model, AutoTokenizer.from_pretrained(model))


def test_an_equivalent_pipeline_and_added_tokens_pass_on_the_graded_prompts(
    tiny, tmp_path, graded_prompts
) -> None:
    def equivalent(tok) -> None:
        # NFC changes nothing in ASCII text; a new token is an added token, allowed
        tok.normalizer = normalizers.Sequence([normalizers.NFC()])
        tok.add_tokens(["<tool>"])

    check = _check(tiny, tmp_path, equivalent)
    assert check is not None, "the normaliser differs: checked on the prompts"
    check.check(graded_prompts)  # no refusal


def test_a_rewriting_normaliser_is_refused_only_where_it_rewrites(
    tiny, tmp_path, graded_prompts
) -> None:
    def apples(tok) -> None:
        tok.normalizer = normalizers.Replace(Regex(r"apples\."), "apples. Hint: add them.")

    check = _check(tiny, tmp_path, apples)
    assert check is not None
    check.check(["Question: Bo has 3 pears.\nAnswer:"])
    with pytest.raises(TokenizerRefused) as refused:
        check.check(["Question: Bo has 3 pears.\nAnswer:", "Ava has 2 apples. Ava gets 3"])
    assert str(refused.value) == REFUSED
