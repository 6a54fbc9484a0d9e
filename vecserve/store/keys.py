"""Key names: every Redis key name vecserve uses is built in this module, and nowhere
else (``P`` is the physical prefix of one generation of a model; see
:mod:`vecserve.store`)::

    P:token                  encoded vector bytes (the model's codec), a string key
    P:{b}:token              the same on Redis Cluster: b = crc32(token) % buckets is a
                             hash tag, so a batch needs one MGET per bucket, not per slot
    P#i                      fastText models: encoded vector of n-gram bucket i (P#{b}:i
                             on a cluster, b = i % buckets); '#' is in no model name and
                             no prefix, so these never meet a token's key
    vecserve:models          hash    name -> JSON ModelInfo of the COMMITTED generation
    vecserve:loads           hash    name -> JSON LoadState of an unfinished load
    vecserve:generation      hash    name -> last generation number handed out
    vecserve:vocab:P         list    one blob per written batch: the batch's tokens
    vecserve:vocabn:P        string  uint32 little-endian token count of each blob
    vecserve:counts:P        string  int64 little-endian counts, in vocabulary order
    vecserve:ngrams:P        string  number of n-gram bucket keys P#i the generation has
                             (set before the first is written, so a delete finds them)
    vecserve:vocabh:P        string  sorted uint64 hashes of the vocabulary's words (at
                             commit): readers tell a lost row from an unknown word
    vecserve:checks          hash    name -> JSON of the last `vecserve models check`
    vecserve:trash           set     prefixes whose keys are being deleted
    vecserve:lock:name       string  lease of the process loading ``name``
    vecserve:history:name    hash    generation -> JSON {"retired", "info"} of each retired
                             generation of ``name`` still kept (pinned, or kept for
                             rollback), and "keep": how many its last load keeps unpinned
    vecserve:pins:name       set     pin ids ``GEN:host:pid:nonce`` of ``name`` (pruned by
                             collectors; a pin is live only while its key exists)
    vecserve:pin:name:ID     string  one pin of a generation, a lease: set ``PX``, renewed
                             with ``SET XX PX`` by its holder (see :mod:`.pins`)
    vecserve:text:P          string  the generation's text blob (tokenizer, phrases)
    vecserve:replicated:{K}  string  a scratch key in key K's slot (waiting for replicas)
    vecserve:events          pub/sub JSON on every commit and delete
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Collection, Sequence

import numpy as np

from ..errors import InvalidModelName

NS = "vecserve"
MODELS = f"{NS}:models"
LOADS = f"{NS}:loads"
GENERATION = f"{NS}:generation"
TRASH = f"{NS}:trash"
EVENTS = f"{NS}:events"
CHECKS = f"{NS}:checks"
# The metadata every load reads and writes, whatever its model.
SHARED_METADATA = (MODELS, LOADS, GENERATION, TRASH, CHECKS)
DEFAULT_CLUSTER_BUCKETS = 128
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def vocab_key(prefix: str) -> str:
    return f"{NS}:vocab:{prefix}"


def vocab_sizes_key(prefix: str) -> str:
    return f"{NS}:vocabn:{prefix}"


def counts_key(prefix: str) -> str:
    return f"{NS}:counts:{prefix}"


def ngrams_key(prefix: str) -> str:
    return f"{NS}:ngrams:{prefix}"


def vocab_hashes_key(prefix: str) -> str:
    """A generation's vocabulary as sorted 64-bit word hashes (little-endian uint64,
    :func:`vecserve.subwords.word_hashes`), written at commit: readers tell a word whose
    row is lost (damage) from an unknown one, and a fastText reader learns which words of
    a batch are missing before it reads them."""
    return f"{NS}:vocabh:{prefix}"


def text_key(prefix: str) -> str:
    """A generation's text blob (:mod:`vecserve.text`): the tokenizer and the phrase list
    a worker needs to cut text into the model's tokens, so that it needs no files."""
    return f"{NS}:text:{prefix}"


def encode_tokens(tokens: Sequence[str]) -> list[bytes]:
    """Tokens as the bytes used in keys (UTF-8; lone surrogates kept round-trippable)."""
    return [t.encode("utf-8", "surrogateescape") for t in tokens]


def decode_tokens(raw: Sequence[bytes]) -> list[str]:
    return [t.decode("utf-8", "surrogateescape") for t in raw]


def generation_prefix(name: str, generation: int, busy: Collection[str]) -> str:
    """The prefix ``P`` of the keys of a new generation of ``name``: the name itself when
    no generation in ``busy`` uses it (a model loaded once lives at exactly
    ``NAME:token``), else ``NAME~GENERATION``.

    >>> generation_prefix("M", 3, set()), generation_prefix("M", 3, {"M"})
    ('M', 'M~3')
    """
    return name if name not in busy else f"{name}~{generation}"


def is_generation_of(prefix: str, name: str) -> bool:
    """Whether ``prefix`` is one of model ``name``'s generation prefixes.

    >>> is_generation_of("M~3", "M"), is_generation_of("M", "M"), is_generation_of("MX", "M")
    (True, True, False)
    """
    return prefix == name or (prefix.startswith(name + "~") and prefix[len(name) + 1 :].isdigit())


def model_of_prefix(prefix: str) -> str:
    """The model a generation prefix belongs to.

    >>> model_of_prefix("M~3"), model_of_prefix("M")
    ('M', 'M')
    """
    return prefix.split("~")[0]


def vector_key_prefix(prefix: str) -> bytes:
    """What every vector key of the generation with this prefix begins with (for CLIENT
    TRACKING and the integrity check's EXISTS): ``P:``, then the token or ``{b}:token``.

    >>> vector_key_prefix("M")
    b'M:'
    """
    return prefix.encode() + b":"


def ngram_key_prefix(prefix: str) -> bytes:
    """What every n-gram bucket row's key of the generation with this prefix begins with:
    ``P#``, then the bucket number in decimal (``{b}:`` before it on a cluster). The
    fastText read's script (``subword_read.lua``) and the integrity check's EXISTS join
    bucket numbers to it.

    >>> ngram_key_prefix("FT")
    b'FT#'
    """
    return prefix.encode() + b"#"


def vector_key(key_prefix: bytes, token: str) -> bytes:
    """The key of one token in a generation without hash-tag buckets whose keys begin
    with ``key_prefix`` (:attr:`ModelInfo.key_prefix`): :func:`vector_keys` of one word.

    >>> vector_key(b"M:", "car")
    b'M:car'
    """
    return key_prefix + token.encode("utf-8", "surrogateescape")


def vector_keys(prefix: str, raw: Sequence[bytes], buckets: int = 0) -> list[bytes]:
    """Key names of tokens (given as bytes) in the generation with this prefix.

    >>> vector_keys("M", [b"car"]), vector_keys("M", [b"car"], 128)
    ([b'M:car'], [b'M:{29}:car'])
    """
    p = vector_key_prefix(prefix)
    if not buckets:
        return [p + t for t in raw]
    return [b"%s{%d}:%s" % (p, zlib.crc32(t) % buckets, t) for t in raw]


def token_of_key(key_prefix: bytes, key: bytes, buckets: int = 0) -> str | None:
    """The token whose vector key (:func:`vector_keys`) is ``key``, in the generation whose
    keys begin with ``key_prefix`` (:attr:`ModelInfo.key_prefix`) and have ``buckets``
    hash tags; None if ``key`` is not one of its vector keys.

    >>> token_of_key(b"M:", b"M:car"), token_of_key(b"M:", b"M:{29}:car", 128)
    ('car', 'car')
    >>> token_of_key(b"M:", b"M:{1}:x"), token_of_key(b"M:", b"N:car")
    ('{1}:x', None)
    """
    if not key.startswith(key_prefix):
        return None
    raw = key[len(key_prefix) :]
    if buckets:
        end = raw.find(b"}:")
        if raw[:1] != b"{" or end < 0:
            return None
        raw = raw[end + 2 :]
    return raw.decode("utf-8", "surrogateescape")


def ngram_keys(prefix: str, ids: np.ndarray | Sequence[int], buckets: int = 0) -> list[bytes]:
    """Key names of n-gram bucket rows ``ids`` of the generation with this prefix.

    >>> ngram_keys("FT", [7]), ngram_keys("FT", [7], 128)
    ([b'FT#7'], [b'FT#{7}:7'])
    """
    p = ngram_key_prefix(prefix)
    ids = np.asarray(ids, dtype=np.int64).tolist()
    if not buckets:
        return [b"%s%d" % (p, i) for i in ids]
    return [b"%s{%d}:%d" % (p, i % buckets, i) for i in ids]


def group_by_tag(keys: Sequence[bytes]) -> list[list[int]]:
    """Indices of ``keys`` grouped by their ``{b}`` hash tag, in first-seen order.

    Keys of one group share a cluster slot, so each group is one multi-key command.

    >>> group_by_tag([b"M:{1}:a", b"M:{2}:b", b"M:{1}:c"])
    [[0, 2], [1]]
    """
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(keys):
        lo = key.find(b"{")
        tag = key[lo : key.index(b"}", lo) + 1] if lo >= 0 else key
        groups.setdefault(tag, []).append(i)
    return list(groups.values())


def model_key_patterns(name: str) -> list[str]:
    """Glob patterns of every key a load of model ``name`` writes (for Redis ACLs).

    Its generations' vectors (``name:...`` and ``name~<gen>:...``), their vocabulary
    and counts, its lease, its retired generations and pins; not the registry hashes
    every load shares (:data:`SHARED_METADATA`). Model names hold no glob characters.

    >>> model_key_patterns("W2V")[:3]
    ['W2V:*', 'W2V~*', 'W2V#*']
    """
    out = row_key_patterns(name)
    for key in (vocab_key, vocab_sizes_key, counts_key, ngrams_key, vocab_hashes_key, text_key):
        out += [key(name), key(f"{name}~*")]
    return [*out, lock_key(name), history_key(name), *pin_key_patterns(name)]


def row_key_patterns(name: str) -> list[str]:
    """Glob patterns of the row keys (words' and n-grams') of every generation of ``name``.

    >>> row_key_patterns("W2V")
    ['W2V:*', 'W2V~*', 'W2V#*']
    """
    validate_model_name(name)
    return [f"{name}:*", f"{name}~*", f"{name}#*"]


def prefix_of_row_key(key: bytes) -> str:
    """The generation prefix of a row key (a word's or an n-gram bucket's).

    >>> prefix_of_row_key(b"M~3:{29}:car"), prefix_of_row_key(b"FT#17")
    ('M~3', 'FT')
    """
    return key.decode("utf-8", "replace").split(":")[0].split("#")[0]


#: The kinds of generation metadata key (``vecserve:KIND:P``) a search for what remains of
#: a model looks for, and what each is called in messages.
_METADATA_KINDS = {
    vocab_key(""): "vocabulary",
    vocab_sizes_key(""): "vocabulary sizes",
    vocab_hashes_key(""): "word hashes",
    counts_key(""): "counts",
    ngrams_key(""): "n-gram settings",
}
#: Matches every metadata key (a SCAN pattern): what :func:`metadata_of_key` reads.
METADATA_PATTERN = f"{NS}:*"


def metadata_of_key(key: bytes) -> tuple[str, str] | None:
    """``(prefix, what)`` of a generation metadata key, None for any other key.

    >>> metadata_of_key(b"vecserve:vocabh:M~2"), metadata_of_key(b"vecserve:models")
    (('M~2', 'word hashes'), None)
    """
    text = key.decode("utf-8", "replace")
    for head, what in _METADATA_KINDS.items():
        if text.startswith(head):
            return text[len(head) :], what
    return None


def replication_marker(slot_of: str) -> str:
    """A scratch key in the same cluster slot as the key (or hash tag) ``slot_of``: the
    loader writes it and then ``WAIT``s on the same connection, so the replicas of the node
    that holds ``slot_of`` are known to have everything written before.

    >>> replication_marker("vecserve:models")
    'vecserve:replicated:{vecserve:models}'
    """
    return f"{NS}:replicated:{{{slot_of}}}"


def lock_key(name: str) -> str:
    return f"{NS}:lock:{name}"


# The field of a model's history hash that holds how many retired generations to keep.
HISTORY_KEEP = b"keep"


def history_key(name: str) -> str:
    return f"{NS}:history:{name}"


def pins_key(name: str) -> str:
    return f"{NS}:pins:{name}"


def pin_key(name: str, pin_id: str) -> str:
    return f"{NS}:pin:{name}:{pin_id}"


def pin_id(generation: int, holder: str) -> str:
    """The id of a pin of ``generation`` held by ``holder`` (``host:pid:nonce``).

    >>> pin_id(3, "web1:42:9f2c"), pin_generation(pin_id(3, "web1:42:9f2c"))
    ('3:web1:42:9f2c', (3, 'web1:42:9f2c'))
    """
    return f"{generation}:{holder}"


def pin_generation(pid: str | bytes) -> tuple[int, str]:
    """``(generation, holder)`` of a pin id; ``(-1, id)`` for one vecserve did not write."""
    text = pid.decode() if isinstance(pid, bytes) else pid
    gen, _, holder = text.partition(":")
    return (int(gen), holder) if gen.isdigit() else (-1, text)


def pin_key_patterns(name: str | None = None) -> list[str]:
    """Glob patterns of the keys that taking, renewing and releasing pins write: the pin
    keys and the pin index of model ``name`` (of every model when None).

    >>> pin_key_patterns("W2V")
    ['vecserve:pins:W2V', 'vecserve:pin:W2V:*']
    """
    if name is None:
        return [pins_key("*"), f"{NS}:pin:*"]
    validate_model_name(name)
    return [pins_key(name), pin_key(name, "*")]


def validate_model_name(name: str) -> str:
    """Return ``name`` if it can be a model name, else raise InvalidModelName.

    >>> validate_model_name("GOOGLE_W2V")
    'GOOGLE_W2V'
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidModelName(
            f"invalid model name {name!r}: use 1-128 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    if name.lower() == NS:
        raise InvalidModelName(f"model name {name!r} is reserved for vecserve's metadata")
    return name
