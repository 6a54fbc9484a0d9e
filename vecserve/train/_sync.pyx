# cython: language_level=3
"""The per-coordinate passes of a sync between ranks, one pass over the rows each.

:class:`~vecserve.train.distributed.Synchronizer` runs these on the main thread while
the training threads wait, so each step (the change, the touch flag, the squared norm
and the largest change of a row; then the gain and the two updates) is one pass
without the GIL and without temporary arrays, where NumPy would take a pass and an
array per operation. The float32 arithmetic is NumPy's, coordinate by coordinate;
squared norms are summed in row order, so they may differ from NumPy's pairwise sums
in the last bits (every rank runs this same code, so ranks stay in agreement).

Rows are C-contiguous float32; ``out`` rows hold the ``d`` coordinates, then the touch
flag, then (``coherent``) the squared norm.
"""

cimport cython
from libc.math cimport INFINITY, fabsf, lrintf
from libc.string cimport memcpy

#: the integer payloads' element types: int16 and int8
ctypedef fused qint:
    short
    signed char

# NaN and infinity are found by their exponent bits (all ones): the extension is built
# with -ffast-math, under which the compiler may take isfinite() to be always true.


@cython.boundscheck(False)
@cython.wraparound(False)
def snapshot_rows(const float[:, ::1] w, const float[:, ::1] base, const float[:, ::1] sent,
                  float[:, ::1] delta, float[:, ::1] out, bint coherent, float[::1] peak,
                  const Py_ssize_t[::1] at=None):
    """``delta = w - base`` (``- sent`` if ``sent`` has rows: changes already on their
    way); ``out[:, :d] = delta``; the touch flag; the squared norm; ``peak`` (if not
    empty): each row's largest ``|delta|``, infinite if the row holds a NaN or an
    infinity. ``at``: row ``i`` is ``w[at[i]]`` (a matrix synchronised in an order of
    its own), else ``w[i]``."""
    cdef Py_ssize_t n = base.shape[0], d = w.shape[1], i, j, r
    cdef bint want_peak = peak.shape[0] > 0
    cdef bint in_flight = sent.shape[0] > 0
    cdef bint indexed = at is not None
    cdef float x, sq, top, a
    cdef int touched, bad
    cdef unsigned int bits
    if indexed and at.shape[0] != n:
        raise ValueError("at must hold one row of w a row of base")
    with nogil:
        for i in range(n):  # branch-free, so the compiler vectorises the row's loop
            r = at[i] if indexed else i
            sq = 0
            top = 0
            touched = 0
            bad = 0
            for j in range(d):
                x = w[r, j] - base[i, j]
                if in_flight:  # loop-invariant: the compiler unswitches it
                    x = x - sent[i, j]
                delta[i, j] = x
                out[i, j] = x
                touched |= x != 0
                sq = sq + x * x
                a = fabsf(x)
                top = a if a > top else top
                memcpy(&bits, &x, 4)
                bad |= (bits & 0x7F800000u) == 0x7F800000u
            out[i, d] = touched
            if coherent:
                out[i, d + 1] = sq
            if want_peak:
                peak[i] = INFINITY if bad else top


@cython.boundscheck(False)
@cython.wraparound(False)
def quantize_rows(const float[:, ::1] buf, const float[::1] scale, qint[:, ::1] q,
                  bint coherent, float norm_unit):
    """``q[:, :d] = rint(buf[:, :d] * scale)``, the touch flag as is, and (``coherent``)
    ``rint(squared norm * scale**2 / norm_unit)``."""
    cdef Py_ssize_t n = buf.shape[0], d = q.shape[1] - (2 if coherent else 1), i, j
    cdef float s
    with nogil:
        for i in range(n):
            s = scale[i]
            for j in range(d):
                q[i, j] = <qint>lrintf(buf[i, j] * s)
            q[i, d] = <qint>buf[i, d]
            if coherent:
                q[i, d + 1] = <qint>lrintf(buf[i, d + 1] * ((s * s) / norm_unit))


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_rows(const qint[:, ::1] q, const float[::1] inv, float[:, ::1] buf,
                    bint coherent, float norm_unit):
    """The inverse of :func:`quantize_rows` on the summed integers; into ``buf`` of
    ``d`` columns, the coordinates alone (a rank's own change as the others read it)."""
    cdef Py_ssize_t n = buf.shape[0], d = q.shape[1] - (2 if coherent else 1), i, j
    cdef bint extras = buf.shape[1] > d
    cdef float s
    with nogil:
        for i in range(n):
            s = inv[i]
            for j in range(d):
                buf[i, j] = q[i, j] * s
            if not extras:
                continue
            buf[i, d] = q[i, d]
            if coherent:
                buf[i, d + 1] = q[i, d + 1] * ((s * s) * norm_unit)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
def apply_rows(const float[:, ::1] part, const float[:, ::1] delta, float[:, ::1] base,
               float[:, ::1] weights, float cap, bint coherent, bint exact,
               const Py_ssize_t[::1] at=None):
    """Add each row's summed change x its gain to ``base``; ``weights`` gets the same
    minus this rank's own change since the snapshot (``exact``: ``weights = base``).
    Returns False, having changed nothing, if the payload holds a NaN or infinity.
    ``at``: row ``i`` of ``weights`` is ``weights[at[i]]``, as in :func:`snapshot_rows`."""
    cdef Py_ssize_t n = part.shape[0], d = base.shape[1], i, j, r
    cdef Py_ssize_t width = part.shape[1]
    cdef bint indexed = at is not None
    if indexed and at.shape[0] != n:
        raise ValueError("at must hold one row of weights a row of part")
    cdef float touches, gain, sq, norm, agree, change, x
    cdef int bad = 0
    cdef unsigned int bits
    with nogil:
        for i in range(n):
            for j in range(width):
                x = part[i, j]
                memcpy(&bits, &x, 4)
                bad |= (bits & 0x7F800000u) == 0x7F800000u
    if bad:
        return False
    with nogil:
        for i in range(n):
            r = at[i] if indexed else i
            touches = part[i, d]
            gain = (touches if touches < cap else cap) / (touches if touches > 1 else 1)
            if coherent:  # 1 / (how many ranks' changes agree): |sum|^2 / sum |d_r|^2
                sq = part[i, d + 1]
                norm = 0
                for j in range(d):
                    norm = norm + part[i, j] * part[i, j]
                agree = sq / (norm if norm > 1e-30 else 1e-30)
                agree = 0 if agree < 0 else (1 if agree > 1 else agree)
                if agree > gain:
                    gain = agree
            if exact:
                for j in range(d):
                    base[i, j] = base[i, j] + part[i, j] * gain
                    weights[r, j] = base[i, j]
            else:
                for j in range(d):
                    change = part[i, j] * gain
                    base[i, j] = base[i, j] + change
                    weights[r, j] = weights[r, j] + (change - delta[i, j])
    return True
