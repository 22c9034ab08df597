"""The ``tiny`` model's tokenizer: a small byte-level BPE with single-digit tokens.

Built offline and deterministically with the ``tokenizers`` library from a corpus generated
here from fixed seeds (:func:`training_corpus`): arith-lite's problems as the grader prompts
them and alfworld-lite-style transcripts, plus the lite tasks' fixed protocol lines.

Why this shape (its figures are measured, not written here: ``benchmarks/tiny_tokenizer.py``
writes what it learns to ``docs/figures/data/tiny_tokenizer.json``, and
``benchmarks/lite_learning.py``'s training runs are in ``docs/figures.md``):

- **Byte-level** (GPT-2's 256-symbol byte alphabet as the base): every string encodes, so
  nothing is ever unknown, whatever text a future lite task brings (its words just split
  into more pieces).
- **Digits are always single tokens** (``Digits(individual_digits=True)`` runs before the
  byte-level split, so no merge can join a digit to anything): the model does arithmetic on
  digits, as the character-level tokenizer let it, with every number written the same way
  wherever it appears.
- **Words are whole tokens**: the lite tasks' vocabulary is small (arith-lite's names and
  items, alfworld-lite's rooms and objects), so a few hundred merges cover it and a prompt
  is several times fewer tokens than characters. Shorter sequences make each training step
  cheaper and put the numbers a question mentions a few positions from where they are used.
- Merges never cross a word or a space-to-digit boundary, so a prompt's tokens are a prefix
  of the prompt-plus-completion's tokens when the completion starts with a space, a digit or
  a newline (as every lite task's does): training and grading tokenize alike.

Edge cases: a string that is not UTF-8-representable cannot reach the tokenizer (Python
strings are Unicode; every code point has a UTF-8 encoding); characters outside ASCII become
one token per byte. No special token is added when encoding (no BOS/EOS post-processor): the
grader tokenizes prompts with ``add_special_tokens=False`` and training appends EOS itself.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

#: the pad, begin and end of sequence tokens (ids 0, 1, 2)
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")
#: Vocabulary size asked for, the 256 bytes and the specials included: room for every word
#: of the corpus as one token and for words of future lite tasks in pieces. Training stops
#: short of it when no pair is left to merge twice, so the tokenizer may be smaller (the
#: size it learns: docs/figures/data/tiny_tokenizer.json). A larger value would only add
#: unused rows to the embedding (merges never cross words).
VOCAB_SIZE = 1024
#: problems of each kind in the corpus: enough for every word to recur many times
_CORPUS_ITEMS = 3000
_CORPUS_SEED = 7

# alfworld-lite's vocabulary (agent2rl.tasks.alfworld.generate_lite's floor plans, lowercased
# as the game prints them) and the sentences its engine writes; held here rather than
# imported so that the tokenizer does not change when a game generator does.
_ROOMS = {  # each room's receptacles and objects
    "kitchen": ("countertop fridge microwave sinkbasin", "apple mug egg potato"),
    "bedroom": (
        "desk sidetable shelf bed drawer cabinet",
        "book pen keychain cellphone mug desklamp",
    ),
    "bathroom": ("countertop sinkbasin toilet cabinet", "soapbar cloth spraybottle"),
}
_GOALS = (
    "put a {o} in {r}",
    "put some {o} on {r}",
    "put a clean {o} in {r}",
    "put a hot {o} in {r}",
    "put a cool {o} in {r}",
    "put two {o} in {r}",
    "find two {o} and put them in {r}",
    "heat some {o} and put it in {r}",
    "cool some {o} and put it in {r}",
    "clean some {o} and put it in {r}",
    "look at {o} under the desklamp",
    "examine the {o} with the desklamp",
)


def training_corpus(seed: int = _CORPUS_SEED, n: int = _CORPUS_ITEMS) -> Iterator[str]:
    """The BPE's training text: ``n`` arith-lite problems (prompt and worked answer, as the
    grader prompts a base model) and ``n`` alfworld-lite-style transcript snippets, from
    ``seed``. Deterministic: the same text on every machine."""
    from agent2rl.tasks.arith_lite import FORMAT, generate_split

    for row in generate_split(seed, n):
        yield FORMAT.template.format(**row) + FORMAT.completion_template.format(**row) + "\n\n"
    rng = random.Random(seed)
    for _ in range(n):
        yield _alfworld_snippet(rng)
    # the protocols' fixed lines, once each is enough to keep them in the merges' counts
    yield "Reply with the next action only, exactly as listed above.\n"
    yield "Show the calculation, then give the final answer after '####'.\n"


def _alfworld_snippet(rng: random.Random) -> str:
    """A few steps of an alfworld-lite transcript in the protocol's layout."""
    receptacles, objects = map(str.split, rng.choice(list(_ROOMS.values())))
    r, r2 = rng.sample(receptacles, 2)
    o = rng.choice(objects)
    n, m = rng.randint(1, 3), rng.randint(1, 3)
    seen = ", ".join(f"a {x} {rng.randint(1, 3)}" for x in rng.sample(objects, 2))
    around = ", ".join(f"a {x} 1" for x in receptacles[:-1]) + f", and a {receptacles[-1]} 1"
    lines = [
        f"Your task is to: {rng.choice(_GOALS).format(o=o, r=r2)}.",
        f"You are in the middle of a room. Looking quickly around you, you see {around}.",
        f"> go to {r} {n}",
        f"You arrive at {r} {n}. On the {r} {n}, you see {seen}.",
        f"> open {r} {n}",
        f"You open the {r} {n}. The {r} {n} is open. In it, you see nothing.",
        f"> take {o} {m} from {r} {n}",
        f"You pick up the {o} {m} from the {r} {n}.",
        f"> {rng.choice(('heat', 'cool', 'clean'))} {o} {m} with {r2} 1",
        f"> move {o} {m} to {r2} 1",
        f"You move the {o} {m} to the {r2} 1.",
        "> inventory",
        f"You are carrying: a {o} {m}.",
        f"> examine {r} {n}",
        "Nothing happens.",
        f"> use desklamp {n}",
        f"You turn on the desklamp {n}.",
        f"> close {r} {n}",
        f"You close the {r} {n}.",
    ]
    start = rng.randrange(2)
    return "\n".join(lines[start : start + rng.randint(6, len(lines))]) + "\n>"


def build_tokenizer(vocab_size: int = VOCAB_SIZE, model_max_length: int = 512):
    """The tokenizer as a ``transformers`` fast tokenizer (saved with ``save_pretrained``).

    ``vocab_size`` counts the 256 byte symbols and :data:`SPECIAL_TOKENS`; training stops
    earlier when the corpus has no pair left to merge, so ``len(tokenizer)`` may be smaller.
    Raises ``ValueError`` for a ``vocab_size`` below the byte alphabet plus the specials.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet plus specials")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    core.train_from_iterator(training_corpus(), trainer=trainer)
    pad, bos, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        model_max_length=model_max_length,
        # decode() must give back exactly the generated text: no space clean-up
        clean_up_tokenization_spaces=False,
    )
