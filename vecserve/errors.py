"""Every exception vecserve raises.

The hierarchy: four families a caller can catch whole (configuration, loading, the
store, querying), then errors of their own::

    VecserveError                    root: ``except VecserveError`` catches them all
    ├── ConfigurationError           a setting or argument that cannot be used (a ValueError)
    │   ├── InvalidModelName         a model name that cannot be a key prefix
    │   ├── InvalidSetting           a flag, VECSERVE_* variable or argument out of range
    │   └── CodecError               unknown codec or a value of the wrong size
    ├── LoadError                    a load that cannot go on (``resumable``: False)
    │   ├── VectorFileError          a problem with an input vector file
    │   │   ├── UnknownFormat        the format cannot be detected or is not supported
    │   │   │   └── FormatMismatch   the content is not the format given (names the likely one)
    │   │   └── CorruptVectorFile    the bytes do not parse (names file and position)
    │   │       ├── DimensionMismatch  a vector with the wrong number of components
    │   │       └── TrailingData     bytes after the records the header declares
    │   ├── LoadInProgress           another load of the same model holds the lock
    │   ├── LoadRefused              a load that cannot fit, or a server that evicts
    │   └── LoadIncomplete           keys missing before the commit: not committed
    ├── StoreError                   Redis, its user's rights, what it holds
    │   ├── StoreUnavailable         Redis unreachable or gone mid-operation
    │   │   ├── GenerationChanged    a model was re-loaded under a read, again and again
    │   │   ├── LoadInterrupted      a load stopped by it (also a LoadError; ``resumable``)
    │   │   └── ServerRefused        an error reply: what the server said, what to do
    │   │       ├── OutOfMemory      OOM: ``maxmemory`` reached
    │   │       ├── ReadOnlyServer   READONLY: a replica
    │   │       ├── PersistenceFailing  MISCONF: it cannot save, so it refuses writes
    │   │       ├── ServerLoading    LOADING: still reading its data (retry)
    │   │       ├── ServerBusy       BUSY: a script or function runs (retry)
    │   │       ├── AuthenticationFailed  NOAUTH / WRONGPASS: the URL's credentials
    │   │       └── TooManyClients   ``maxclients`` reached (retry)
    │   ├── PermissionDenied         the Redis user may not run a command (names both)
    │   ├── PinLost                  a pinned view's lease ended: its generation may be gone
    │   ├── LayoutTooNew             stored by a newer vecserve in a layout this one cannot read
    │   └── ModelDamaged             a model's word lost its vector (NOT a KeyError)
    ├── QueryError                   a question that cannot be answered as asked
    │   ├── ModelNotFound            no committed model of that name (also a KeyError)
    │   ├── TokenNotFound            a word missing from a model (also a KeyError)
    │   ├── BadQuery                 a malformed query (the service answers 422)
    │   ├── QueryRejected            a well-formed query that cannot be answered (400)
    │   │   ├── TextRejected         text that cannot be embedded (not UTF-8, too long, too many)
    │   │   └── NoTokenizer          a model with no recorded way to cut text into tokens
    │   └── RequestTooLarge          a request body over the service's limit (413)
    ├── SnapshotDamaged              a local snapshot file is damaged (which file, which part)
    ├── SimilarityServiceError       the vecserve HTTP service failed (unreachable, 5xx)
    ├── EmbeddedServerError          the embedded valkey-server did not start
    └── TrainingError                the trainer cannot start or go on (corpus, parameters, run)

Third-party errors (redis-py, OSError from files) are translated to these at exactly
one boundary each, with ``raise Ours(msg) from exc`` so the cause stays attached.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationFailed",
    "BadQuery",
    "CodecError",
    "ConfigurationError",
    "CorruptVectorFile",
    "DimensionMismatch",
    "EmbeddedServerError",
    "FormatMismatch",
    "GenerationChanged",
    "InvalidModelName",
    "InvalidSetting",
    "LayoutTooNew",
    "LoadError",
    "LoadInProgress",
    "LoadIncomplete",
    "LoadInterrupted",
    "LoadRefused",
    "ModelDamaged",
    "ModelNotFound",
    "NoTokenizer",
    "OutOfMemory",
    "PermissionDenied",
    "PersistenceFailing",
    "PinLost",
    "QueryError",
    "QueryRejected",
    "ReadOnlyServer",
    "RequestTooLarge",
    "ServerBusy",
    "ServerLoading",
    "ServerRefused",
    "SimilarityServiceError",
    "SnapshotDamaged",
    "StoreError",
    "StoreUnavailable",
    "TextRejected",
    "TokenNotFound",
    "TooManyClients",
    "TrailingData",
    "TrainingError",
    "UnknownFormat",
    "VecserveError",
    "VectorFileError",
]


class VecserveError(Exception):
    """Root of every error vecserve raises on purpose."""


class ConfigurationError(VecserveError, ValueError):
    """A setting or argument that cannot be used; also a ``ValueError``, so callers'
    ``except ValueError`` keeps working."""


class LoadError(VecserveError):
    """A load that cannot go on. ``resumable``: whether what it wrote is kept and the
    load can continue from it (``load_file(..., resume=True)``); False unless the error
    says otherwise (:class:`LoadInterrupted`)."""

    resumable = False


class StoreError(VecserveError):
    """The store: Redis unreachable or refusing, the Redis user's rights, what it holds."""


class QueryError(VecserveError):
    """A question (a model, a word, a query) that cannot be answered as asked."""


class InvalidModelName(ConfigurationError):
    """A model name that cannot be used as a Redis key prefix."""


class InvalidSetting(ConfigurationError):
    """A setting that cannot be used: a flag, a ``VECSERVE_*`` variable or an argument
    (a Redis URL without a scheme, a data dir that cannot be made); the message names the
    setting, its value and what is expected."""


class ModelNotFound(QueryError, KeyError):
    """No committed model of this name exists in the store."""

    def __init__(self, name: str, hint: str = ""):
        self.name = name
        msg = f"model {name!r} not found"
        super().__init__(f"{msg}; {hint}" if hint else msg)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TokenNotFound(QueryError, KeyError):
    """A word is not in the model: a ``KeyError`` with gensim's own message.

    gensim words it two ways: ``Key 'x' not present in vocabulary`` from ``most_similar``
    and the calls that average vectors (the default here), and ``Key 'x' not present``
    from its lookups (``kv['x']``, ``get_index``; ``lookup=True``). The model's name is
    the ``model`` attribute, kept out of the message so ``str(exc)`` is gensim's;
    ``missing`` lists every missing word of the request (``token`` is the first).

    >>> str(TokenNotFound("qwzx", "W2V")), TokenNotFound("qwzx", "W2V").model
    ("Key 'qwzx' not present in vocabulary", 'W2V')
    """

    def __init__(
        self,
        token: str,
        model: str = "",
        *,
        lookup: bool = False,
        missing: list[str] | None = None,
    ):
        self.token = token
        self.model = model
        self.missing = list(missing) if missing else [token]
        super().__init__(f"Key '{token}' not present" + ("" if lookup else " in vocabulary"))

    def __str__(self) -> str:
        return str(self.args[0])


class VectorFileError(LoadError):
    """Something is wrong with an input vector file."""

    def __init__(self, path: str, message: str):
        self.path = str(path)
        super().__init__(f"{path}: {message}")


class UnknownFormat(VectorFileError, ValueError):
    """The file's format could not be detected, or the named format is not supported."""


class CorruptVectorFile(VectorFileError, ValueError):
    """The file does not parse; the message names the file and the position."""

    def __init__(
        self,
        path: str,
        message: str,
        *,
        offset: int | None = None,
        line: int | None = None,
        record: int | None = None,
    ):
        self.offset = offset
        self.line = line
        self.record = record
        where = []
        if line is not None:
            where.append(f"line {line}")
        if record is not None:
            where.append(f"vector #{record}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(path, f"{', '.join(where)}: {message}" if where else message)


class DimensionMismatch(CorruptVectorFile):
    """A vector has a different number of components than the file or model declares."""


class FormatMismatch(UnknownFormat):
    """The content is not the format given (or detected): ``declared`` is that format,
    ``detected`` the one the content looks like (None when it looks like none)."""

    def __init__(self, path: str, message: str, *, declared: str, detected: str | None):
        self.declared = declared
        self.detected = detected
        super().__init__(path, message)


class TrailingData(CorruptVectorFile):
    """Bytes follow the records the file's header declares; ``remaining`` counts them
    (decompressed bytes) and ``lines`` the lines among them (text formats, else None)."""

    def __init__(self, path: str, message: str, *, remaining: int, lines: int | None, **where):
        self.remaining = remaining
        self.lines = lines
        super().__init__(path, message, **where)


class CodecError(ConfigurationError):
    """An unknown codec name, or encoded bytes of the wrong length for a codec."""


class LoadInProgress(LoadError):
    """Another process is loading the same model right now."""


class StoreUnavailable(StoreError, ConnectionError):
    """The Redis server cannot be reached, or went away in the middle of an operation.

    ``transient``: whether trying again later may succeed (a load retries only then).
    """

    transient = True


class ServerRefused(StoreUnavailable):
    """The server answered a command with an error reply.

    ``reply`` is the reply's code (``OOM``, ``READONLY``, ``MISCONF``, ...); the message
    says what the server said and what to do about it.
    """

    transient = False

    def __init__(self, message: str, *, reply: str = ""):
        self.reply = reply
        super().__init__(message)


class OutOfMemory(ServerRefused):
    """OOM: the server reached its ``maxmemory`` and refuses writes (policy noeviction)."""


class ReadOnlyServer(ServerRefused):
    """READONLY: the server is a replica; writes go to its primary."""


class PersistenceFailing(ServerRefused):
    """MISCONF: the server cannot save its snapshot and refuses writes until it can."""


class ServerLoading(ServerRefused):
    """LOADING: the server is still reading its dataset into memory."""

    transient = True


class ServerBusy(ServerRefused):
    """BUSY: a script or function is running; every other command waits for its end."""

    transient = True


class AuthenticationFailed(ServerRefused):
    """NOAUTH / WRONGPASS: the server refused the credentials of the URL (or none)."""


class TooManyClients(ServerRefused):
    """The server reached ``maxclients`` and refused the connection."""

    transient = True


class LayoutTooNew(StoreError):
    """A model (or its unfinished load) stored in a key layout newer than this vecserve
    reads: ``model``, ``layout`` (the stored one) and ``supported`` (the newest this one
    reads). Nothing is read, replaced or deleted under it."""

    def __init__(self, model: str, layout: int, supported: int):
        self.model, self.layout, self.supported = model, layout, supported
        super().__init__(
            f"model {model!r} is stored in layout {layout}, written by a newer vecserve; "
            f"this one reads layouts up to {supported}: upgrade vecserve to read or load it"
        )


class ModelDamaged(StoreError):
    """Words of a model's vocabulary whose vectors are gone (evicted, deleted by hand).

    Deliberately NOT a ``KeyError``: gensim-style ``except KeyError`` code must not take a
    lost word for an unknown one. ``model``, ``generation``, ``lost`` (how many of the
    asked words) and ``words`` (a few of them) say what was found.
    """

    def __init__(self, model: str, generation: int, lost: list[str], asked: int, *, what: str = ""):
        self.model, self.generation, self.lost, self.words = model, generation, len(lost), lost[:5]
        shown = ", ".join(repr(w) for w in lost[:3]) + (", ..." if len(lost) > 3 else "")
        what = what or (
            f"{len(lost)} of the {asked} words asked are in its vocabulary but their vectors "
            f"are gone from Redis ({shown}; evicted, or deleted by hand)"
        )
        super().__init__(
            f"model {model!r} (generation {generation}) is damaged: {what}; run `vecserve "
            f"models check {model}`, then load the model again"
        )


class SnapshotDamaged(VecserveError, ValueError):
    """A file of a local similarity snapshot that is not whole: the snapshot is rebuilt.

    ``path`` is the file; ``part`` what it holds (``"vocabulary"``, rewritten alone from
    Redis; ``"arrays"``, the vectors and norms: the whole snapshot is rebuilt; or
    ``"int8 rows"``, the first pass of exact batches: packed again from the vectors);
    ``reason`` what is wrong. Also a ``ValueError``, as a damaged file's contents are.
    """

    def __init__(self, path, part: str, reason: str, *, what: str = ""):
        self.path, self.part, self.reason = str(path), part, reason
        what = what or {"vocabulary": "damaged vocabulary file"}.get(part, "damaged snapshot file")
        super().__init__(f"{path}: {what} ({reason})")


class LoadRefused(LoadError):
    """A load refused before writing: it cannot fit, or the server may evict its keys."""


class LoadIncomplete(LoadError):
    """Vectors missing from a load's new generation before the commit: not committed."""


class PermissionDenied(StoreError, PermissionError):
    """The Redis user vecserve connects as may not run a command it needs.

    Not a :class:`StoreUnavailable`: retrying does not help; the user's ACL must change
    (``vecserve acl`` prints least-privilege roles).
    """


class GenerationChanged(StoreUnavailable):
    """A model's generation changed under a read every time it was tried: retry later."""


class LoadInterrupted(StoreUnavailable, LoadError):
    """Redis went away during a load; nothing is visible.

    The fields say what a caller needs to go on: ``model``, ``path`` (the file),
    ``written`` (vectors already in Redis), ``reason`` (what went wrong with Redis),
    ``resumable`` (what was written is kept and the load can continue from it; False
    for a stream, which cannot be read again: its partial load is dropped) and
    ``resume_command``, the command that continues a resumable load. The message states
    what happened; what to do next is the caller's to say (the CLI writes it from
    ``resumable``).

    >>> exc = LoadInterrupted("connection reset", model="W2V", path="w.bin", written=1200)
    >>> exc.reason, exc.written, exc.resumable, exc.resume_command
    ('connection reset', 1200, True, 'vecserve load w.bin --key W2V --resume')
    """

    def __init__(self, reason: str, *, model: str, path: str, written: int, resumable: bool = True):
        self.reason = reason
        self.model = model
        self.path = str(path)
        self.written = written
        self.resumable = resumable
        kept = (
            "what was written is kept to resume from"
            if resumable
            else "a stream cannot be read again"
        )
        super().__init__(
            f"{reason}. Load of {model!r} from {path} stopped after {written:,} vectors; "
            f"nothing is visible, and {kept}."
        )

    @property
    def resume_command(self) -> str:
        return f"vecserve load {self.path} --key {self.model} --resume"


class PinLost(StoreError):
    """A pinned view's pin is gone (it expired unrenewed, or the model was deleted): its
    generation may be deleted, so the view reads no more. Pin again to go on."""


class SimilarityServiceError(VecserveError, ConnectionError):
    """The vecserve HTTP service (``similarity_url``) is unreachable or answered a 5xx."""

    def __init__(self, message: str, *, status: int | None = None):
        self.status = status
        super().__init__(message)


class BadQuery(QueryError, ValueError):
    """A query item that is none of the accepted forms (the service answers 422)."""


class QueryRejected(QueryError, ValueError):
    """A well-formed query the engine cannot answer (gensim raises ValueError; 400)."""


class TextRejected(QueryRejected):
    """Text that cannot be embedded: not UTF-8, longer than the limit, or a batch of more
    texts than the limit (the message says which text and which limit; answered 400)."""


class NoTokenizer(QueryRejected):
    """``embed`` of a model with no recorded text rule (no tokenizer, no word rule) and no
    ``tokenizer=`` override (answered 400)."""


class RequestTooLarge(QueryError):
    """A request body over the service's ``max_body_bytes`` (answered 413)."""


class EmbeddedServerError(VecserveError):
    """The embedded valkey-server could not be started or reached."""


class TrainingError(VecserveError, ValueError):
    """The trainer cannot start or go on: a bad corpus or parameters (found before any
    thread starts), or a failure mid-run (a training thread's error, a diverged model, a
    failed sync between ranks, a checkpoint or output file that cannot be written).

    ``collective``: every rank of a distributed job raises this same error at the same
    point (bad parameters, the merged vocabulary, a checkpoint that cannot be resumed),
    so ``vecserve train`` prints it once, on rank 0.
    """

    def __init__(self, message: str = "", *, collective: bool = False):
        super().__init__(message)
        self.collective = collective
