"""Text embedders for the similarity metric: an offline n-gram default and an optional adapter."""

from __future__ import annotations

import importlib
import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least

__all__ = ["Embedder", "NGramEmbedder", "SentenceTransformerEmbedder"]

Vectors = npt.NDArray[np.float64]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into one vector per text (rows of a 2-D array)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One vector per text, in order (the rows of a 2-D array)."""


def _normalise(text: str) -> str:
    # NFKC folds full-width forms (common in Chinese input) onto their ASCII twins.
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True)
class NGramEmbedder:
    """Character n-gram TF-IDF vectors, L2-normalised; deterministic and offline.

    Character n-grams need no tokenizer, so Chinese works as well as English. The IDF
    comes from ``corpus`` when one is given, otherwise from the texts of each
    ``embed`` call (for a pair: grams shared by both weigh less than distinctive ones).
    Text is NFKC-normalised, case-folded and whitespace-collapsed first.
    """

    ngram_range: tuple[int, int] = (1, 3)
    corpus: Sequence[str] = ()
    sublinear_tf: bool = True
    _df: Counter[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        low, high = self.ngram_range
        require_int_at_least("ngram_range[0]", low, 1)
        require_int_at_least("ngram_range[1]", high, low)
        corpus: object = self.corpus  # callers may pass any iterable, or a str by mistake
        if isinstance(corpus, str) or not isinstance(corpus, Iterable):
            raise ConfigurationError("corpus", corpus, "must be a sequence of str")
        items = tuple(corpus)
        if not all(isinstance(t, str) for t in items):
            raise ConfigurationError("corpus", corpus, "must be a sequence of str")
        object.__setattr__(self, "corpus", items)
        object.__setattr__(self, "_df", self._document_frequencies(self.corpus))

    def grams(self, text: str) -> Counter[str]:
        """The n-gram counts of one text (padded with a space so word edges count)."""
        norm = _normalise(text)
        if not norm:
            return Counter()
        padded = f" {norm} "
        low, high = self.ngram_range
        counts: Counter[str] = Counter()
        for n in range(low, high + 1):
            counts.update(padded[i : i + n] for i in range(len(padded) - n + 1))
        counts.pop(" ", None)  # the padding alone says nothing
        return counts

    def _document_frequencies(self, texts: Iterable[str]) -> Counter[str]:
        df: Counter[str] = Counter()
        for text in texts:
            df.update(self.grams(text).keys())
        return df

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised row per text; a text with no n-grams gets a zero row."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ConfigurationError("texts", texts, "must be a sequence of str")
        docs = [self.grams(t) for t in texts]
        if self.corpus:
            df, n_docs = self._df, len(self.corpus)
        else:
            df, n_docs = self._document_frequencies(texts), len(docs)
        vocab = sorted(set().union(*docs)) if docs else []
        index = {g: i for i, g in enumerate(vocab)}
        out = np.zeros((len(docs), len(vocab)), dtype=np.float64)
        for row, counts in enumerate(docs):
            for gram, count in counts.items():
                tf = 1.0 + math.log(count) if self.sublinear_tf else float(count)
                idf = math.log((1.0 + n_docs) / (1.0 + df.get(gram, 0))) + 1.0
                out[row, index[gram]] = tf * idf
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


class SentenceTransformerEmbedder:
    """Adapter for sentence-transformers, used only if it is installed.

    The import happens on first use; a missing package raises ``ConfigurationError``.
    The model is loaded with ``local_files_only=True``: closedloop never downloads at
    run time, so the model must already be in the local cache or given as a path.
    """

    def __init__(self, model: str, *, device: str | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError("model", model, "must be a model name or path")
        self.model_name = model
        self.device = device
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            try:
                module = importlib.import_module("sentence_transformers")
            except ImportError:
                raise ConfigurationError(
                    "embedder",
                    "sentence-transformers",
                    "is not installed; install it or use the default NGramEmbedder",
                ) from None
            self._model = module.SentenceTransformer(
                self.model_name, device=self.device, local_files_only=True
            )
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Encode ``texts`` with normalised embeddings."""
        model = self._load()
        vectors = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float64)
