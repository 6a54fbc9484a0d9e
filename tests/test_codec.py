import numpy as np
import pytest

from vecserve.codec import CODECS, get_codec
from vecserve.errors import CodecError


@pytest.fixture
def matrix():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((64, 300)).astype(np.float32)
    m[3] = 0.0  # an all-zero vector must survive every codec
    return m


def cos(a, b):
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    return (a[ok] * b[ok]).sum(1) / (na[ok] * nb[ok])


def test_f32_is_exact_and_little_endian(matrix):
    c = get_codec("f32")
    enc = c.encode(matrix)
    assert enc.shape == (64, 1200) and enc.dtype == np.uint8
    assert enc[0].tobytes() == matrix[0].astype("<f4").tobytes()
    back = c.decode(enc.tobytes(), 64, 300)
    assert back.dtype == np.float32 and np.array_equal(back, matrix)


def test_f16_within_measured_cosine(matrix):
    c = get_codec("f16")
    back = c.decode(c.encode(matrix).tobytes(), 64, 300)
    assert c.nbytes(300) == 600
    assert cos(back, matrix).min() > 0.99999
    assert not back[3].any()


def test_i8_error_bounded_by_half_a_step(matrix):
    c = get_codec("i8")
    enc = c.encode(matrix)
    assert enc.shape == (64, 304)
    back = c.decode(enc.tobytes(), 64, 300)
    scale = np.abs(matrix).max(axis=1) / 127
    assert (np.abs(back - matrix) <= scale[:, None] * 0.5 + 1e-6).all()
    assert cos(back, matrix).min() > 0.999
    assert not back[3].any()


def test_f16_refuses_values_out_of_range():
    with pytest.raises(CodecError, match="float16 range"):
        get_codec("f16").encode(np.array([[1e6, 0.0]], dtype=np.float32))


@pytest.mark.parametrize("name", sorted(CODECS))
def test_decode_values_with_missing_and_mask(name, matrix):
    c = get_codec(name)
    rows = [row.tobytes() for row in c.encode(matrix[:3])]
    values = [rows[0], None, rows[2], None]
    out, found = c.decode_values(values, 300)
    assert found.tolist() == [True, False, True, False]
    assert not out[1].any() and not out[3].any()
    ref = c.decode(b"".join(rows), 3, 300)
    assert np.array_equal(out[0], ref[0]) and np.array_equal(out[2], ref[2])


def test_decode_values_names_the_bad_value():
    c = get_codec("f32")
    with pytest.raises(
        CodecError, match=r"value for 'b' has 8 bytes; codec f32 with dim 3 needs 12"
    ):
        c.decode_values([b"\0" * 12, b"\0" * 8], 3, what=["a", "b"])


def test_unknown_codec():
    with pytest.raises(CodecError, match="unknown codec 'f64'; choose one of f16, f32, i8"):
        get_codec("f64")


def test_decode_rejects_wrong_length():
    with pytest.raises(CodecError, match="expected 2 x 12 bytes"):
        get_codec("f32").decode(b"\0" * 20, 2, 3)
