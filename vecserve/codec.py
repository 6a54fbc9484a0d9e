"""Vector codecs: how one vector becomes the bytes of one Redis value, and back.

============  =====================================  ==========  =========================
codec         layout of one value                    bytes/300d  exactness
============  =====================================  ==========  =========================
``f32``       ``dim`` little-endian float32          1200        exact (the default)
``f16``       ``dim`` little-endian float16          600         cosine > 0.99999
``i8``        float32 scale, then ``dim`` int8       304         |err| <= scale / 2
============  =====================================  ==========  =========================

A model's codec is recorded in its metadata, so readers never need a flag. Encoding and
decoding work on whole batches with NumPy; there is no per-vector Python arithmetic, and
no pickle anywhere.

>>> import numpy as np
>>> c = get_codec("f16")
>>> rows = c.encode(np.ones((2, 3), dtype=np.float32))
>>> rows.shape, c.decode(rows.tobytes(), 2, 3).tolist()
((2, 6), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import CodecError

__all__ = ["CODECS", "Codec", "F16Codec", "F32Codec", "I8Codec", "get_codec"]


class Codec:
    """Base class: subclasses set ``name`` and implement the three array methods."""

    name: str = ""

    def nbytes(self, dim: int) -> int:
        """Size in bytes of one encoded vector of ``dim`` components."""
        raise NotImplementedError

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """Encode a ``(n, dim)`` float array into a C-contiguous ``(n, nbytes)`` uint8 array."""
        raise NotImplementedError

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        """Decode a ``(n, nbytes)`` uint8 array into ``(n, dim)`` float32."""
        raise NotImplementedError

    def decode(self, buf: bytes | bytearray | memoryview, n: int, dim: int) -> np.ndarray:
        """Decode ``n`` concatenated encoded vectors into a new ``(n, dim)`` float32 array."""
        size = self.nbytes(dim)
        if len(buf) != n * size:
            raise CodecError(
                f"{self.name}: expected {n} x {size} bytes for dim {dim}, got {len(buf)}"
            )
        raw = np.frombuffer(buf, dtype=np.uint8).reshape(n, size)
        return self._decode(raw, dim)

    def decode_values(
        self, values: Sequence[bytes | None], dim: int, *, what: Sequence[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode Redis values (``None`` for a missing key) into ``(matrix, found)``.

        Rows of missing values are zero; ``found`` is a boolean mask. ``what`` names the
        values (tokens) for the error message when one has the wrong size.
        """
        size = self.nbytes(dim)
        found = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        present = [v for v in values if v is not None]
        buf = b"".join(present)
        if len(buf) != len(present) * size:
            for i, v in enumerate(values):
                if v is not None and len(v) != size:
                    name = repr(what[i]) if what is not None else f"#{i}"
                    raise CodecError(
                        f"value for {name} has {len(v)} bytes; codec {self.name} with dim "
                        f"{dim} needs {size} (was the model written with another codec?)"
                    )
        out = np.zeros((len(values), dim), dtype=np.float32)
        if present:
            out[found] = self.decode(buf, len(present), dim)
        return out, found

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    m = np.asarray(vectors)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2:
        raise CodecError(f"expected a (n, dim) array, got shape {m.shape}")
    return m


class F32Codec(Codec):
    """Raw little-endian float32: exact."""

    name = "f32"

    def nbytes(self, dim: int) -> int:
        return 4 * dim

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        m = np.ascontiguousarray(_as_matrix(vectors), dtype="<f4")
        return m.view(np.uint8).reshape(m.shape[0], -1)

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        return raw.view("<f4").astype(np.float32, copy=True)


class F16Codec(Codec):
    """Little-endian float16: half the size; values beyond +-65504 are refused."""

    name = "f16"

    def nbytes(self, dim: int) -> int:
        return 2 * dim

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        m = _as_matrix(vectors)
        with np.errstate(over="ignore"):
            h = np.ascontiguousarray(m, dtype="<f2")
        if not np.isfinite(h).all() and np.isfinite(m).all():
            raise CodecError("a value is outside the float16 range (+-65504); use f32 or i8")
        return h.view(np.uint8).reshape(h.shape[0], -1)

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        return raw.view("<f2").astype(np.float32)


class I8Codec(Codec):
    """A float32 scale per vector, then int8 components: ``v ~= q * scale``."""

    name = "i8"

    def nbytes(self, dim: int) -> int:
        return 4 + dim

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        m = np.asarray(_as_matrix(vectors), dtype=np.float32)
        n, dim = m.shape
        scale = (
            (np.abs(m).max(axis=1) / np.float32(127.0)).astype(np.float32)
            if dim
            else (np.zeros(n, dtype=np.float32))
        )
        safe = np.where(scale > 0, scale, np.float32(1.0))
        q = np.clip(np.rint(m / safe[:, None]), -127, 127).astype(np.int8)
        out = np.empty((n, 4 + dim), dtype=np.uint8)
        out[:, :4] = scale.astype("<f4").view(np.uint8).reshape(n, 4)
        out[:, 4:] = q.view(np.uint8)
        return out

    def _decode(self, raw: np.ndarray, dim: int) -> np.ndarray:
        scale = np.ascontiguousarray(raw[:, :4]).view("<f4").astype(np.float32)
        q = raw[:, 4:].view(np.int8).astype(np.float32)
        return q * scale


CODECS: dict[str, Codec] = {c.name: c for c in (F32Codec(), F16Codec(), I8Codec())}


def get_codec(name: str) -> Codec:
    """Return the codec called ``name`` (``f32``, ``f16`` or ``i8``)."""
    try:
        return CODECS[name]
    except KeyError:
        raise CodecError(
            f"unknown codec {name!r}; choose one of {', '.join(sorted(CODECS))}"
        ) from None
