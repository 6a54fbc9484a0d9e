"""Key names, metadata records and the vocabulary encoding: the store's data layout.

Every Redis key name vecserve uses is built in this module (``P`` is the physical prefix
of one generation of a model; see :mod:`vecserve.store`)::

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
    vecserve:events          pub/sub JSON on every commit and delete

The vocabulary (``index_to_key``) is kept as one blob per batch rather than one list
element per token: a 1,700-token ``RPUSH`` costs the server ~0.8 us a token, one blob
nothing measurable. A blob is ``uint32 n``, ``n`` uint32 byte lengths, then the tokens'
UTF-8 bytes.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import redis

from ..codec import Codec, get_codec
from ..errors import (
    AuthenticationFailed,
    InvalidModelName,
    OutOfMemory,
    PermissionDenied,
    PersistenceFailing,
    ReadOnlyServer,
    ServerBusy,
    ServerLoading,
    ServerRefused,
    StoreUnavailable,
    TooManyClients,
    VecserveError,
)

NS = "vecserve"
MODELS = f"{NS}:models"
LOADS = f"{NS}:loads"
GENERATION = f"{NS}:generation"
TRASH = f"{NS}:trash"
EVENTS = f"{NS}:events"
CHECKS = f"{NS}:checks"
# The metadata every load reads and writes, whatever its model.
SHARED_METADATA = (MODELS, LOADS, GENERATION, TRASH, CHECKS)
LEASE_SECONDS = 30
DEFAULT_CLUSTER_BUCKETS = 128
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
# A Redis Cluster that is failing over or resharding: transient, like a lost connection.
_CLUSTER_ERRORS = (
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.MovedError,
)


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


def ngram_keys(prefix: str, ids: np.ndarray | Sequence[int], buckets: int = 0) -> list[bytes]:
    """Key names of n-gram bucket rows ``ids`` of the generation with this prefix.

    >>> ngram_keys("FT", [7]), ngram_keys("FT", [7], 128)
    ([b'FT#7'], [b'FT#{7}:7'])
    """
    p = prefix.encode() + b"#"
    ids = np.asarray(ids, dtype=np.int64).tolist()
    if not buckets:
        return [b"%s%d" % (p, i) for i in ids]
    return [b"%s{%d}:%d" % (p, i % buckets, i) for i in ids]


def model_key_patterns(name: str) -> list[str]:
    """Glob patterns of every key a load of model ``name`` writes (for Redis ACLs).

    Its generations' vectors (``name:...`` and ``name~<gen>:...``), their vocabulary
    and counts, its lease, its retired generations and pins; not the registry hashes
    every load shares (:data:`SHARED_METADATA`). Model names hold no glob characters.

    >>> model_key_patterns("W2V")[:3]
    ['W2V:*', 'W2V~*', 'W2V#*']
    """
    validate_model_name(name)
    out = [f"{name}:*", f"{name}~*", f"{name}#*"]
    for key in (vocab_key, vocab_sizes_key, counts_key, ngrams_key, vocab_hashes_key, text_key):
        out += [key(name), key(f"{name}~*")]
    return [*out, lock_key(name), history_key(name), *pin_key_patterns(name)]


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


def encode_tokens(tokens: Sequence[str]) -> list[bytes]:
    """Tokens as the bytes used in keys (UTF-8; lone surrogates kept round-trippable)."""
    return [t.encode("utf-8", "surrogateescape") for t in tokens]


def decode_tokens(raw: Sequence[bytes]) -> list[str]:
    return [t.decode("utf-8", "surrogateescape") for t in raw]


def pack_vocab(raw: Sequence[bytes]) -> bytes:
    """One vocabulary blob: ``uint32 n``, ``n`` uint32 lengths, the token bytes.

    >>> unpack_vocab(pack_vocab([b"a", b"", "λ".encode()]))
    [b'a', b'', b'\\xce\\xbb']
    """
    n = len(raw)
    return struct.pack(f"<I{n}I", n, *map(len, raw)) + b"".join(raw)


def unpack_vocab(blob: bytes) -> list[bytes]:
    """The token bytes of one vocabulary blob."""
    n = int.from_bytes(blob[:4], "little")
    lens = np.frombuffer(blob, dtype="<u4", count=n, offset=4).astype(np.int64)
    ends = np.cumsum(lens) + 4 + 4 * n
    return [blob[s:e] for s, e in zip((ends - lens).tolist(), ends.tolist(), strict=True)]


def vocab_parts(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, bytes)`` of one vocabulary blob's tokens, as views (no copy).

    >>> [a.tolist() for a in vocab_parts(pack_vocab([b"ab", b"c"]))]
    [[2, 1], [97, 98, 99]]
    """
    n = int.from_bytes(blob[:4], "little")
    lens = np.frombuffer(blob, dtype="<u4", count=n, offset=4).astype(np.int64)
    return lens, np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * n)


def resp_exists(prefix: str, lens: np.ndarray, buf: np.ndarray, *, sep: bytes = b":") -> bytes:
    """The RESP bytes of ``EXISTS P:t1 P:t2 ...`` for a single server's keys of tokens
    given as lengths and concatenated bytes (:func:`vocab_parts`), built with array
    operations: a Python loop costs ~1 us a key, this ~0.05. ``sep=b"#"``: n-gram rows'
    keys, the tokens their bucket numbers.

    >>> resp_exists("M", *vocab_parts(pack_vocab([b"car", b"x" * 9])))
    b'*3\\r\\n$6\\r\\nEXISTS\\r\\n$5\\r\\nM:car\\r\\n$11\\r\\nM:xxxxxxxxx\\r\\n'
    """
    pre = np.frombuffer(prefix.encode() + sep, dtype=np.uint8)
    klen = lens + len(pre)
    digits = np.ones(len(klen), dtype=np.int64)
    for power in range(1, 19):
        digits += klen >= 10**power
    size = 1 + digits + 2 + klen + 2  # $<len>\r\n<key>\r\n
    head = b"*%d\r\n$6\r\nEXISTS\r\n" % (len(klen) + 1)
    starts = len(head) + np.cumsum(size) - size
    out = np.empty(len(head) + int(size.sum()), dtype=np.uint8)
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    out[starts] = ord("$")
    for d in range(int(digits.max(initial=1))):
        rows = np.flatnonzero(digits > d)
        out[starts[rows] + 1 + d] = 48 + (klen[rows] // 10 ** (digits[rows] - 1 - d)) % 10
    key = starts + 1 + digits + 2
    out[key - 2], out[key - 1] = 13, 10
    for j, byte in enumerate(pre.tolist()):
        out[key + j] = byte
    total = int(lens.sum())
    if total:
        out[np.repeat(key + len(pre) - (np.cumsum(lens) - lens), lens) + np.arange(total)] = buf[
            :total
        ]
    out[key + klen], out[key + klen + 1] = 13, 10
    return out.tobytes()


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


class _JsonRecord:
    """JSON (de)serialisation of a dataclass record; unknown fields are ignored on load,
    so metadata written by a newer vecserve still reads."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, raw: str | bytes):
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ModelInfo(_JsonRecord):
    """Metadata of one committed generation of a model (the registry entry)."""

    name: str
    dim: int
    codec: str
    count: int
    generation: int
    prefix: str
    buckets: int = 0
    has_counts: bool = False
    source: str = ""
    source_format: str = ""
    sha256: str = ""
    created: float = 0.0
    load_seconds: float = 0.0
    duplicates: int = 0
    # fastText subwords (gensim's FastTextKeyedVectors.min_n, max_n, bucket); 0: none
    min_n: int = 0
    max_n: int = 0
    ngram_buckets: int = 0
    # the vocabulary's word hashes were written at commit (vocab_hashes_key): a lost row
    # is told from an unknown word, and the hashes missing are damage themselves
    word_hashes: bool = False
    # how text is cut into this model's tokens and pooled (vecserve.text.TextSpec as
    # JSON); "": the model has no recorded text rule (word models get a fitted default)
    text: str = ""

    @property
    def subwords(self) -> bool:
        """True for a fastText model whose out-of-vocabulary words get vectors."""
        return self.ngram_buckets > 0

    @property
    def codec_obj(self) -> Codec:
        return get_codec(self.codec)

    @property
    def vocab_key(self) -> str:
        return vocab_key(self.prefix)

    @property
    def key_prefix(self) -> bytes:
        """Common prefix of every vector key of this generation (for CLIENT TRACKING)."""
        return self.prefix.encode() + b":"

    @property
    def counts_key(self) -> str:
        return counts_key(self.prefix)


@dataclass
class LoadState(_JsonRecord):
    """Progress of an unfinished load, kept in ``vecserve:loads`` after every batch."""

    name: str
    dim: int
    codec: str
    generation: int
    prefix: str
    buckets: int = 0
    source: str = ""
    source_format: str = ""
    fingerprint: str = ""
    declared_count: int | None = None
    written: int = 0
    resume: dict = field(default_factory=dict)
    chunks: int = 0
    has_counts: bool = False
    started: float = 0.0
    updated: float = 0.0
    host: str = ""
    pid: int = 0
    min_n: int = 0
    max_n: int = 0
    ngram_buckets: int = 0
    text: str = ""


_CRED_RE = re.compile(r"(\w+://)([^:@/\s]*)(:[^@/\s]*)?@")


def redact_url(text: str) -> str:
    """``text`` with the password of any URL in it hidden (the user name is kept).

    >>> redact_url("Redis at redis://worker:s3cret@db:6379/0 is down")
    'Redis at redis://worker:***@db:6379/0 is down'
    >>> redact_url("rediss://:s3cret@db")
    'rediss://:***@db'
    """
    return _CRED_RE.sub(lambda m: f"{m[1]}{m[2]}{':***' if m[3] else ''}@", text)


def _url_user(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).username or "default"
    except ValueError:
        return "default"


# Error replies: the code a reply starts with -> (our class, what it means, what to do).
_REFUSALS: dict[str, tuple[type[ServerRefused], str, str]] = {
    "OOM": (
        OutOfMemory,
        "is out of memory (maxmemory reached, nothing it may evict)",
        "raise its maxmemory (CONFIG SET maxmemory ...) or free memory",
    ),
    "READONLY": (
        ReadOnlyServer,
        "is a read-only replica",
        "point vecserve at its primary",
    ),
    "MISCONF": (
        PersistenceFailing,
        "refuses writes because it cannot save its snapshot",
        "fix its dir or disk (see its log), or CONFIG SET stop-writes-on-bgsave-error no",
    ),
    "LOADING": (
        ServerLoading,
        "is still loading its dataset into memory",
        "retry when it has finished",
    ),
    "BUSY": (
        ServerBusy,
        "is busy running a script or function",
        "retry when it ends, or stop it (SCRIPT KILL / FUNCTION KILL)",
    ),
    "NOAUTH": (
        AuthenticationFailed,
        "requires a password",
        "put the user and password in the URL (redis://USER:PASSWORD@host)",
    ),
    "WRONGPASS": (
        AuthenticationFailed,
        "refused our credentials",
        "check the user and password in the URL",
    ),
    "MAXCLIENTS": (
        TooManyClients,
        "has reached its maxclients limit",
        "close idle clients or raise maxclients, then retry",
    ),
    "MASTERDOWN": (
        ServerLoading,
        "is a replica that lost its primary",
        "retry when the link is back, or point vecserve at the primary",
    ),
}


def _reply_code(exc: redis.RedisError) -> str:
    """The code of an error reply (``OOM``, ``READONLY``, ...; ``ERR`` for a plain one).

    redis-py strips the code from the messages of the replies it has classes for.
    """
    if isinstance(exc, redis.BusyLoadingError):
        return "LOADING"
    msg = str(exc)
    if "max number of clients" in msg.lower():
        return "MAXCLIENTS"
    if isinstance(exc, redis.AuthenticationError):
        code = getattr(exc, "status_code", None) or ""
        return code if code in ("NOAUTH", "WRONGPASS") else "WRONGPASS"
    code = getattr(exc, "status_code", None)
    if code:
        return str(code)
    for known, cls in (
        ("OOM", redis.exceptions.OutOfMemoryError),
        ("READONLY", redis.exceptions.ReadOnlyError),
    ):
        if isinstance(exc, cls):
            return known
    head = msg.split(" ", 1)[0]
    return head if head.isupper() and head.isalpha() else "ERR"


def refusal(exc: redis.RedisError, url: str, what: str, *, user: str = "") -> ServerRefused | None:
    """The :class:`ServerRefused` of an error reply from ``url`` while doing ``what``,
    or None when ``exc`` is no error reply (a lost connection, a timeout).

    >>> str(refusal(redis.exceptions.ReadOnlyError("You can't write against a read only "
    ...     "replica."), "redis://r:6379/0", "writing vectors"))  # doctest: +ELLIPSIS
    "Redis at redis://r:6379/0 is a read-only replica (READONLY: You can't write ...) while ..."
    """
    code = _reply_code(exc)
    replied = isinstance(exc, (redis.ResponseError, redis.AuthenticationError))
    if not replied and code not in ("LOADING", "MAXCLIENTS"):
        return None
    msg = str(exc).strip()
    if msg.startswith(code + " "):
        msg = msg[len(code) + 1 :]
    msg = msg.split(". ", 1)[0].rstrip(".")  # its first sentence: the message stays short
    cls, meaning, todo = _REFUSALS.get(
        code, (ServerRefused, "answered an error", "see the server's log")
    )
    said = msg if code == "MAXCLIENTS" else f"{code}: {msg}"
    if code == "WRONGPASS" and user:
        meaning = f"refused the credentials of user {user!r}"
    return cls(f"Redis at {url} {meaning} ({said}) while {what}: {todo}", reply=code)


@contextlib.contextmanager
def translate_errors(url: str, what: str) -> Iterator[None]:
    """The one boundary where redis-py's errors become ours: an error reply becomes a
    :class:`ServerRefused` (:func:`refusal`), NOPERM :class:`PermissionDenied`, a lost
    connection :class:`StoreUnavailable` (:func:`translated`).

    Messages never carry a password: ``url`` is redacted. Nothing is computed unless an
    error passes (the read path enters this once a round trip).
    """
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        if isinstance(exc, VecserveError):
            raise  # already ours (raised inside the block): it says what it means
        ours = translated(exc, url, what)
        if ours is None:
            raise
        raise ours from exc


def translated(exc: Exception, url: str, what: str) -> Exception | None:
    """Our exception for redis-py's ``exc`` (None: not ours to translate); what
    :func:`translate_errors` raises."""
    user, url = _url_user(url), redact_url(url)
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PermissionDenied(
            f"Redis user {user!r} at {url} may not do this ({what}): {exc}. "
            "Grant it to the user (`vecserve acl --help` prints least-privilege roles)"
        )
    if isinstance(exc, _CLUSTER_ERRORS):
        return StoreUnavailable(
            f"Redis Cluster at {url} is failing over or moving slots ({what}): {exc}; retry"
        )
    if isinstance(exc, redis.RedisError):
        refused = refusal(exc, url, what, user=user)
        if refused is not None:
            return refused
    if isinstance(exc, _REDIS_ERRORS):
        return StoreUnavailable(f"Redis at {url} is unreachable while {what}: {exc}")
    return None


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
    p = prefix.encode() + b":"
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


def describe_client(client) -> str:
    try:
        kw = client.connection_pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}"
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except AttributeError:
        return "redis-cluster"
