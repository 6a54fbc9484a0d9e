"""vecserve: word vectors served out of Redis, and a fast word2vec trainer that feeds it.

>>> from vecserve import RedisKeyedVectors          # doctest: +SKIP
>>> kv = RedisKeyedVectors("GOOGLE_W2V")             # doctest: +SKIP
>>> kv["king"].shape                                 # doctest: +SKIP
(300,)
"""

from .codec import get_codec
from .errors import (
    AuthenticationFailed,
    BadQuery,
    CodecError,
    ConfigurationError,
    CorruptVectorFile,
    DimensionMismatch,
    EmbeddedServerError,
    FormatMismatch,
    GenerationChanged,
    InvalidModelName,
    InvalidSetting,
    LayoutTooNew,
    LoadError,
    LoadIncomplete,
    LoadInProgress,
    LoadInterrupted,
    LoadRefused,
    ModelDamaged,
    ModelNotFound,
    NoTokenizer,
    OutOfMemory,
    PermissionDenied,
    PersistenceFailing,
    PinLost,
    QueryError,
    QueryRejected,
    ReadOnlyServer,
    RequestTooLarge,
    ServerBusy,
    ServerLoading,
    ServerRefused,
    SimilarityServiceError,
    SnapshotDamaged,
    StoreError,
    StoreUnavailable,
    TextRejected,
    TokenNotFound,
    TooManyClients,
    TrailingData,
    TrainingError,
    UnknownFormat,
    VecserveError,
    VectorFileError,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    # Imported on first use, so `import vecserve` (and the CLI) stay fast.
    if name in ("AsyncRedisKeyedVectors", "RedisKeyedVectors"):
        from . import keyedvectors

        return getattr(keyedvectors, name)
    if name == "Text":
        from .text.query import Text

        return Text
    raise AttributeError(f"module 'vecserve' has no attribute {name!r}")


__all__ = [
    "AsyncRedisKeyedVectors",
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
    "RedisKeyedVectors",
    "RequestTooLarge",
    "ServerBusy",
    "ServerLoading",
    "ServerRefused",
    "SimilarityServiceError",
    "SnapshotDamaged",
    "StoreError",
    "StoreUnavailable",
    "Text",
    "TextRejected",
    "TokenNotFound",
    "TooManyClients",
    "TrailingData",
    "TrainingError",
    "UnknownFormat",
    "VecserveError",
    "VectorFileError",
    "__version__",
    "get_codec",
]
