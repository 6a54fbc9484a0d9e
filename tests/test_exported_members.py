import vecserve


def test_all_is_sorted_and_importable():
    assert vecserve.__all__ == sorted(vecserve.__all__)
    for name in vecserve.__all__:
        assert getattr(vecserve, name) is not None, name


def test_lazy_export_is_the_real_class():
    from vecserve.keyedvectors import RedisKeyedVectors

    assert vecserve.RedisKeyedVectors is RedisKeyedVectors
