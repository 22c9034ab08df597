"""A model's chat template, rendered by the grader under a content-preservation rule.

A submission's chat template is a Jinja program over the conversation: left alone, one could
read "Ava has 23 apples. Ava gets 45 more" and append "Hint: 68", and the score would stop
measuring the weights. The grader therefore accepts a rendering only if the template treats
each message's text as opaque:

    rendering the real messages == rendering the same conversation with each message's text
    replaced by a stand-in (a fresh random token between the text's own leading and trailing
    whitespace), then putting each text's core (the text less that whitespace) back in its
    token's place.

The stand-in keeps the edges so that a template that trims the texts (Jinja's ``trim`` in
Llama 3's template) trims the stand-in alike and passes, while a template cannot choose
whether to trim by what a text says: that choice would be a channel for the answer.

Everything around the texts (role markers, special tokens, a default system prompt, the
generation prompt) is then the same whatever the texts say, so the template cannot compute
anything from them. The check runs on every prompt the grader renders (a template that only
misbehaves on some questions is caught on those), and a prompt that fails it fails the
evaluation as the model's fault (:class:`ChatTemplateRefused`, a
:class:`~agent2rl.errors.ModelFault`): the policy is to refuse, not to grade with another
template, so that a score always comes from the submission as it was submitted.

Rendering is transformers' own (``render_jinja_template``, with the tokenizer's special tokens,
exactly what ``tokenizer.apply_chat_template`` does), but in a child process
(:class:`TemplateRenderer`) with a time limit per prompt, an address-space limit and a cap on
the rendered size: Jinja's sandbox stops a template from reaching Python, not from looping
for hours or building a string of gigabytes.

What a refusal says is chosen so that it cannot carry graded text back to the agent (the
grading API returns it): a syntax error comes with its message (it depends on the template
only); every failure on a graded prompt (an error raised, a time, memory or length limit
passed, text not preserved) gives one and the same message (:data:`FAILED`), so that which
way the template failed, on which message, with what count or length, cannot tell the agent
anything about the prompt it failed on (a template could choose among them by what the prompt
says). The detail goes to the renderer's caller's stderr (the grader's private log) and is
kept on the exception (``detail``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent2rl.child_process import spawn_child
from agent2rl.errors import ModelFault

Messages = Sequence[Mapping[str, Any]]

#: The renderer child's program (``-c``: ``-m`` would import this module twice).
_CHILD = "import sys; from agent2rl.inference.chat_template import _serve; sys.exit(_serve())"

_FIX = (
    "a chat template may only wrap each message's text in role markers and special tokens; "
    "fix or remove `chat_template` in the submission's tokenizer files"
)


#: The one message of every refusal made on a graded prompt (see the module's docstring).
FAILED = (
    "the chat template failed on a graded prompt: it raised, passed its time, memory or length"
    " limit, or what it renders around the messages depends on what they say (which, and on"
    f" which prompt, is withheld: it would tell the private prompts apart); {_FIX}; render"
    " public examples with tokenizer.apply_chat_template to find the problem"
)


class ChatTemplateRefused(ModelFault):
    """The submission's chat template failed on a graded prompt. Its message is ``public`` (a
    syntax error, from the template alone) or else :data:`FAILED`, whatever the failure;
    ``detail`` says which failure it was, never what the prompt said."""

    def __init__(self, detail: str, public: str | None = None) -> None:
        super().__init__(public or FAILED)
        self.detail = detail


def _refused(detail: str) -> ChatTemplateRefused:
    """The refusal for a failure on a graded prompt, its detail logged to stderr only."""
    print(f"chat template refused: {detail}", file=sys.stderr, flush=True)
    return ChatTemplateRefused(detail)


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on rendering one prompt (its real and its stand-in conversation together).

    ``timeout_s``: wall-clock seconds per prompt (a real template takes milliseconds, so the
    margin covers a loaded machine);
    ``start_timeout_s``: for the renderer process to start (importing transformers);
    ``max_chars``: the longest rendered prompt, plus twice the messages' own length;
    ``memory_bytes``: address space the renderer may add to what it holds once started.
    """

    timeout_s: float = 10.0
    start_timeout_s: float = 120.0
    max_chars: int = 1_000_000
    memory_bytes: int = 1 << 30


class TemplateRenderer:
    """A child process that renders chat templates with transformers' renderer, one request at
    a time, under :class:`RenderLimits`.

    Started on the first :meth:`render` (and again after it was killed or died between
    requests), with ``cwd=/`` and ``python -P`` so that nothing in the caller's directory is
    importable; it stays in the caller's process group (killing an evaluation worker's group
    kills it too) and gets SIGTERM from the kernel if the caller dies. It starts no process
    of its own. Thread-safe (one request at a time). A child that does not start is the
    harness's problem (``RuntimeError``); a render that times out, errs or kills the child
    is the template's (:class:`ChatTemplateRefused`).
    """

    def __init__(self, limits: RenderLimits | None = None) -> None:
        self.limits = limits or RenderLimits()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def render(
        self, template: str, variables: Mapping[str, Any], conversations: list[Messages]
    ) -> list[str]:
        """Each conversation through ``template`` with the generation prompt, ``variables``
        (the tokenizer's special tokens) as template variables; in order."""
        size = sum(len(str(m.get("content", ""))) for c in conversations for m in c)
        request = {
            "template": template,
            "variables": dict(variables),
            "conversations": [[dict(m) for m in c] for c in conversations],
            "max_chars": self.limits.max_chars + 2 * size,
        }
        data = (json.dumps(request, default=str) + "\n").encode()
        with self._lock:
            line = self._exchange(self._ensure_started(), data, self.limits.timeout_s)
            if line is None:
                self._kill()
                raise _refused(
                    f"rendering the chat template took more than {self.limits.timeout_s:g} s "
                    "on a graded prompt (a loop?)"
                )
            if not line:
                code = self._kill()
                raise _refused(
                    f"the chat template's renderer died (exit status {code}) rendering a "
                    "graded prompt"
                )
        reply = json.loads(line)
        if "error" in reply:
            if reply.get("syntax"):  # from the template's source alone: shown as it is
                detail = f"the chat template failed: {reply['error']}; {_FIX}"
                raise ChatTemplateRefused(detail, public=detail)
            raise _refused(f"the chat template failed: {reply['error']}")
        return [str(r) for r in reply["rendered"]]

    def close(self) -> None:
        """Stop the child (idempotent); a later :meth:`render` starts a new one."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the child exits at end of input
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
            self._kill()

    def __enter__(self) -> TemplateRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            # Died between requests (not while rendering): not the template's doing.
            self._kill()
        proc = spawn_child(
            [sys.executable, "-P", "-c", _CHILD],
            env=dict(os.environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the caller's: where a crash's traceback is seen
            cwd="/",
            new_session=False,  # killing an evaluation worker's group kills its renderer too
        )
        self._proc = proc
        hello = (json.dumps({"memory_bytes": self.limits.memory_bytes}) + "\n").encode()
        ready = self._exchange(proc, hello, self.limits.start_timeout_s)
        if not ready or json.loads(ready).get("ready") is not True:
            code = self._kill()
            raise RuntimeError(
                f"the chat-template renderer did not start (exit status {code}); "
                "see the worker's stderr"
            )
        return proc

    def _exchange(self, proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> bytes | None:
        """Send ``data`` and read one reply line; b"" at end of output (or when the child no
        longer reads), None after ``timeout`` seconds."""
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except BrokenPipeError:
            return b""
        fd = proc.stdout.fileno()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return b""
                buf += chunk
        return bytes(buf)

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return code


class ChatTemplate:
    """One model's chat template and the special tokens it is rendered with; :meth:`render`
    builds a prompt and checks it (see the module's docstring)."""

    def __init__(
        self,
        template: str,
        variables: Mapping[str, Any] | None = None,
        renderer: TemplateRenderer | None = None,
    ) -> None:
        self.template = template
        self.variables = dict(variables or {})
        self._own_renderer = renderer is None
        self.renderer = renderer or TemplateRenderer()

    @classmethod
    def of_tokenizer(
        cls, tokenizer: Any, renderer: TemplateRenderer | None = None
    ) -> ChatTemplate | None:
        """The template ``tokenizer.apply_chat_template`` would use, with the same variables
        (its special tokens map); None when the tokenizer has none (a base model). A set of
        named templates without a ``default`` one is refused, as transformers refuses it."""
        if not getattr(tokenizer, "chat_template", None):
            return None
        try:
            template = tokenizer.get_chat_template()
        except ValueError as err:
            raise ChatTemplateRefused(
                f"unusable chat template: {err}", public=f"unusable chat template: {err}"
            ) from err
        return cls(template, dict(getattr(tokenizer, "special_tokens_map", {}) or {}), renderer)

    def render(self, messages: Messages) -> str:
        """``messages`` through the template with the generation prompt, as transformers
        renders them; raises :class:`ChatTemplateRefused` when the template fails, exceeds
        :class:`RenderLimits`, or does not preserve the messages' texts. Every message needs a
        ``content`` string (a ``TypeError`` otherwise: the caller's bug)."""
        if not messages:
            raise ValueError("no messages to render")
        contents = []
        for m in messages:
            if not isinstance(m.get("content"), str):
                raise TypeError(f"message content must be a string, not {m.get('content')!r}")
            contents.append(m["content"])
        tokens, texts = stand_ins(contents, avoid=(self.template, *contents))
        masked = [{**m, "content": t} for m, t in zip(messages, texts, strict=True)]
        real, stand_in = self.renderer.render(self.template, self.variables, [messages, masked])
        roles = [str(m.get("role", "?")) for m in messages]
        cores = [split_edges(c)[1] for c in contents]
        problem = preservation_problem(real, stand_in, tokens, cores, roles)
        if problem is not None:
            raise _refused(f"the chat template does not preserve the prompt's text: {problem}")
        return real

    def close(self) -> None:
        """Stop the renderer if this object started it."""
        if self._own_renderer:
            self.renderer.close()


def split_edges(text: str) -> tuple[str, str, str]:
    """``text`` as (leading whitespace, core, trailing whitespace); an all-whitespace text is
    all leading whitespace."""
    rest = text.lstrip()
    lead = text[: len(text) - len(rest)]
    core = rest.rstrip()
    return lead, core, rest[len(core) :]


def stand_ins(contents: Sequence[str], avoid: Sequence[str]) -> tuple[list[str], list[str]]:
    """For each content, a fresh random token (letters and digits, in none of ``avoid`` and
    distinct) and the stand-in message text: the token between the content's own leading and
    trailing whitespace. A template that trims (Llama 3's ``| trim``) thus trims the stand-in
    as it trims the text, and one that trims only some texts cannot hide a choice in it."""
    tokens: list[str] = []
    while len(tokens) < len(contents):
        t = f"msg{secrets.token_hex(16)}"
        if t not in tokens and not any(t in a for a in avoid):
            tokens.append(t)
    edges = [split_edges(c) for c in contents]
    return tokens, [lead + t + trail for (lead, _, trail), t in zip(edges, tokens, strict=True)]


def preservation_problem(
    real: str,
    stand_in: str,
    tokens: Sequence[str],
    cores: Sequence[str],
    roles: Sequence[str],
) -> str | None:
    """None when ``real`` equals ``stand_in`` with each message's token replaced by the core
    of its text (see :func:`split_edges`: the stand-in carried the edges); else what is
    wrong, naming messages by position and role and never quoting a text, so that it can be
    shown to whoever wrote the template.

    Each token must occur exactly once in ``stand_in`` (in any order: a template may move
    the system message). Since the stand-in rendering never saw the texts, whatever the
    accepted prompt holds around them cannot depend on what they say.
    """
    where: list[tuple[int, int]] = []
    for i, t in enumerate(tokens):
        count = stand_in.count(t)
        if count != 1:
            how = "is dropped or rewritten" if count == 0 else f"is repeated {count} times"
            return f"message {i + 1} ({roles[i]}) {how}"
        where.append((stand_in.index(t), i))
    expected, pos = [], 0
    for start, i in sorted(where):
        expected += [stand_in[pos:start], cores[i]]
        pos = start + len(tokens[i])
    expected.append(stand_in[pos:])
    if "".join(expected) != real:
        return (
            "what it renders around the messages depends on what they say (it adds, drops or "
            "changes text for these messages that it does not for others)"
        )
    return None


# --- the renderer child --------------------------------------------------------------------


def _limit_memory(extra: int) -> None:
    """Cap this process's address space at what it maps now plus ``extra`` bytes."""
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it)."""
    first = next((line for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first[:300]}" if first else type(err).__name__


def _serve() -> int:
    """The child's loop: a JSON hello (limits), then one JSON request per line on stdin, one
    JSON reply per line on stdout (``rendered`` or ``error``); ends at end of input."""
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the replies
    import jinja2
    from transformers.utils.chat_template_utils import render_jinja_template

    hello = json.loads(sys.stdin.buffer.readline() or b"{}")
    _limit_memory(int(hello.get("memory_bytes", RenderLimits.memory_bytes)))
    proto.write(b'{"ready": true}\n')
    for line in sys.stdin.buffer:
        reply: dict[str, Any]
        try:
            req = json.loads(line)
            rendered, _ = render_jinja_template(
                conversations=req["conversations"],
                chat_template=req["template"],
                add_generation_prompt=True,
                **req["variables"],
            )
            longest = max(len(r) for r in rendered)
            if longest > req["max_chars"]:
                reply = {
                    "error": f"the rendered prompt has {longest} characters, more than the "
                    f"limit of {req['max_chars']}"
                }
            else:
                reply = {"rendered": rendered}
        except jinja2.TemplateSyntaxError as err:
            # Raised by the parser, from the template's source alone: safe to show.
            reply = {"error": one_line(err), "syntax": True}
        except Exception as err:  # noqa: BLE001 - any failure is the template's, reported
            reply = {
                "error": f"{type(err).__name__} raised while rendering a graded prompt (its "
                "message is withheld: it could quote the prompt; render a public example "
                "with tokenizer.apply_chat_template to see it)"
            }
        proto.write((json.dumps(reply) + "\n").encode())
    return 0
