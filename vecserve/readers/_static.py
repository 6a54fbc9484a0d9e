"""Static embedding model directories: a token table, its tokenizer and how to pool.

==========================  ================================================  ==============
layout                      files                                             reference
==========================  ================================================  ==============
model2vec                   ``config.json``, ``model.safetensors``            ``StaticModel``
                            (``embeddings`` float32/float16/int8, optional    ``.encode``
                            ``weights`` per token id, ``mapping`` id -> row),
                            ``tokenizer.json``
sentence-transformers       ``modules.json`` naming a ``StaticEmbedding``     ``Sentence``
                            module dir (``model.safetensors`` with            ``Transformer``
                            ``embedding.weight``, ``tokenizer.json``); a      ``.encode``
                            ``Normalize`` module makes it normalised
wordllama                   ``weights/*.safetensors`` (``embedding.weight``)  ``WordLlama``
                            and ``tokenizers/*.json`` (the ``wordllama``      ``.embed``
                            package's own directory), or one
                            ``*.safetensors`` beside a ``tokenizer.json``
==========================  ================================================  ==============

:func:`read_static` gives the rows keyed by the tokenizer's token strings (so ``kv[token]``
works), each row as the reference pools it: ``embeddings[mapping[id]] * weights[id]`` for
Model2Vec, int8 rows as their integer values (as Model2Vec computes with them); the
tokenizer's JSON (the model's text blob); and the :class:`~vecserve.text.TextSpec` with
the reference's truncation, unknown-token rule and normalisation. A tokenizer whose ids
run past the table is refused, naming both sizes. :func:`static_layout` tells whether a
directory is one of these.

>>> model = read_static("potion-base-8M")          # doctest: +SKIP
>>> model.vectors.shape, model.spec.family        # doctest: +SKIP
((29528, 256), 'model2vec')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CorruptVectorFile, UnknownFormat, VectorFileError
from ..text.spec import TextSpec

__all__ = ["StaticModelFiles", "read_static", "static_layout"]


@dataclass(frozen=True)
class StaticModelFiles:
    """What :func:`read_static` read: rows, tokens, the tokenizer, the text spec."""

    tokens: list[str]
    vectors: np.ndarray  # float32 (len(tokens), dim)
    tokenizer: bytes  # tokenizer.json, the model's text blob
    spec: TextSpec
    source_format: str  # model2vec | sentence-transformers | wordllama


def _first(paths) -> Path | None:
    found = sorted(paths)
    return found[0] if found else None


def static_layout(path: str | Path) -> tuple[str, Path, Path] | None:
    """``(layout, safetensors file, tokenizer file)`` if ``path`` is a static model
    directory, else None."""
    d = Path(path)
    if not d.is_dir():
        return None
    if all((d / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")):
        return "model2vec", d / "model.safetensors", d / "tokenizer.json"
    if (d / "modules.json").is_file():
        try:
            modules = json.loads((d / "modules.json").read_text())
        except (OSError, ValueError):
            modules = []
        for m in modules if isinstance(modules, list) else []:
            if isinstance(m, dict) and str(m.get("type", "")).endswith("StaticEmbedding"):
                sub = d / m.get("path", "")
                if (sub / "model.safetensors").is_file() and (sub / "tokenizer.json").is_file():
                    return (
                        "sentence-transformers",
                        sub / "model.safetensors",
                        sub / "tokenizer.json",
                    )
    weights = _first((d / "weights").glob("*.safetensors")) if (d / "weights").is_dir() else None
    tok = _first((d / "tokenizers").glob("*.json")) if (d / "tokenizers").is_dir() else None
    if weights is not None and tok is not None:
        return "wordllama", weights, tok
    weights = _first(d.glob("*.safetensors"))
    if weights is not None and (d / "tokenizer.json").is_file():
        return "wordllama", weights, d / "tokenizer.json"
    return None


def _needs(module: str, path: Path):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise UnknownFormat(
            str(path), f"a static model needs the {module!r} package: pip install 'vecserve[text]'"
        ) from None


def _tensors(path: Path) -> dict[str, np.ndarray]:
    _needs("safetensors.numpy", path)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CorruptVectorFile(str(path), f"not a readable safetensors file: {exc}") from exc


def _tokenizer(path: Path):
    Tokenizer = _needs("tokenizers", path).Tokenizer

    blob = path.read_bytes()
    try:
        return blob, Tokenizer.from_str(blob.decode("utf-8"))
    except Exception as exc:  # the tokenizers library raises its own bare Exception
        raise CorruptVectorFile(str(path), f"not a tokenizers JSON: {exc}") from exc


def _unk_id(tok) -> int | None:
    """Model2Vec's unknown id: the model's ``unk_token`` (WordPiece, BPE, WordLevel) or a
    Unigram model's ``unk_id``."""
    model = tok.model
    if hasattr(model, "unk_token"):
        token = model.unk_token
        return None if token is None else tok.token_to_id(token)
    return json.loads(tok.to_str())["model"].get("unk_id")


def read_static(path: str | Path) -> StaticModelFiles:
    """Read a static model directory (see the module docstring)."""
    found = static_layout(path)
    if found is None:
        raise UnknownFormat(
            str(path),
            "not a static model directory (Model2Vec: config.json, model.safetensors, "
            "tokenizer.json; sentence-transformers: modules.json with a StaticEmbedding; "
            "WordLlama: weights/*.safetensors and tokenizers/*.json)",
        )
    layout, weights_path, tok_path = found
    blob, tok = _tokenizer(tok_path)
    tensors = _tensors(weights_path)
    key = "embeddings" if layout == "model2vec" else "embedding.weight"
    if key not in tensors:
        raise CorruptVectorFile(
            str(weights_path), f"holds no {key!r} tensor (it has {sorted(tensors)})"
        )
    table = tensors[key]
    if table.ndim != 2 or table.dtype not in (np.float32, np.float16, np.int8, np.float64):
        raise CorruptVectorFile(
            str(weights_path), f"{key!r} is {table.dtype} {table.shape}, not a 2-d float/int8 table"
        )
    vocab = tok.get_vocab(with_added_tokens=True)
    ids = np.fromiter(vocab.values(), np.int64, len(vocab))
    tokens = list(vocab)
    order = np.argsort(ids, kind="stable")
    ids, tokens = ids[order], [tokens[i] for i in order.tolist()]
    extra = tensors if layout == "model2vec" else {}
    vectors = _token_rows(table, ids, extra, weights_path=weights_path, tok_path=tok_path)
    spec = _text_spec(Path(path), layout, tok, blob, tokens, table.shape[1])
    return StaticModelFiles(tokens, np.ascontiguousarray(vectors), blob, spec, layout)


def _token_rows(table, ids, extra: dict, *, weights_path: Path, tok_path: Path) -> np.ndarray:
    """Each token id's float32 row: through Model2Vec's token ``mapping`` where there is
    one, scaled by its per-token ``weights`` where there are some."""
    size = int(ids[-1]) + 1 if len(ids) else 0
    mapping, weights = extra.get("mapping"), extra.get("weights")
    if mapping is not None:
        mapping = np.asarray(mapping, np.int64).reshape(-1)
        if len(mapping) < size or (len(mapping) and mapping.max() >= len(table)):
            raise VectorFileError(
                str(tok_path),
                f"the tokenizer has ids up to {size - 1:,} and the token mapping "
                f"{len(mapping):,} entries into a table of {len(table):,} rows: they do not match",
            )
        rows_of = mapping[ids]
    else:
        if size > len(table):
            raise VectorFileError(
                str(tok_path),
                f"the tokenizer's ids run to {size - 1:,} ({size:,} tokens) past the table "
                f"of {len(table):,} rows in {weights_path.name}: not this model's tokenizer",
            )
        rows_of = ids
    vectors = table[rows_of].astype(np.float32)
    if weights is not None:
        weights = np.asarray(weights).reshape(-1)
        if len(weights) < size:
            raise VectorFileError(
                str(weights_path), f"{len(weights):,} token weights for {size:,} token ids"
            )
        vectors *= weights[ids].astype(np.float32)[:, None]
    return vectors


def _text_spec(path: Path, layout: str, tok, blob: bytes, tokens, dim: int) -> TextSpec:
    """The text rule of a static model of ``layout``, from its own configuration."""
    if layout == "model2vec":
        try:
            config = json.loads((path / "config.json").read_text())
        except ValueError as exc:
            raise CorruptVectorFile(str(path / "config.json"), f"not JSON: {exc}") from exc
        max_length = config.get("max_length", 512)
        median = int(np.median([len(t) for t in tokens])) if tokens else 0
        unk = _unk_id(tok)
        return TextSpec(
            kind="tokenizer",
            family="model2vec",
            normalize=bool(config.get("normalize", False)),
            max_tokens=max_length,
            max_chars=None if max_length is None else max_length * median,
            drop_ids=() if unk is None else (int(unk),),
        )
    if layout == "sentence-transformers":
        modules = json.loads((path / "modules.json").read_text())
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
        tok_truncation = json.loads(blob).get("truncation") or {}
        return TextSpec(
            kind="tokenizer",
            family="sentence-transformers",
            normalize=normalize,
            max_tokens=tok_truncation.get("max_length"),
        )
    return TextSpec(
        kind="tokenizer",
        family="wordllama",
        dims=tuple(d for d in (64, 128, 256, 512, 1024) if d <= dim),
    )
