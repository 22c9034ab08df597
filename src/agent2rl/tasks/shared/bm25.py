"""BM25 ranking with ``bm25s``, as WebShop's shop and deepsearch's local corpus search: Lucene's
scoring with pyserini's ``k1 = 0.9, b = 0.4`` (what WebShop's Lucene index searches with),
English stop words and the Snowball English stemmer (close to Lucene's English analyzer).
Offline and deterministic."""

from __future__ import annotations

import threading

import numpy as np

BM25_K1 = 0.9
BM25_B = 0.4


class BM25Index:
    """BM25 over ``texts``. Thread-safe: the tokenizer's vocabulary lookups are not, so a
    lock guards them."""

    def __init__(self, texts: list[str]) -> None:
        import bm25s
        import Stemmer
        from bm25s.tokenization import Tokenizer

        self.size = len(texts)
        self._tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english").stemWord)
        corpus = self._tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
        self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self._bm25.index(corpus, show_progress=False)
        self._lock = threading.Lock()

    def rank(self, query: str, k: int) -> list[int]:
        """The indices of up to ``k`` texts scoring above 0 for ``query``, best first, ties in
        the order of ``texts``; ``[]`` for a query of stop words only."""
        with self._lock:
            tokens = self._tokenizer.tokenize(
                [query], update_vocab=False, return_as="string", show_progress=False
            )[0]
            tokens = [t for t in tokens if t]
            if not tokens or not self.size:
                return []
            scores = np.asarray(self._bm25.get_scores(tokens), dtype=float)
        order = np.lexsort((np.arange(len(scores)), -scores))
        return [int(i) for i in order[:k] if scores[i] > 0]
