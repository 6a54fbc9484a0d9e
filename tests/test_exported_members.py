import vecserve


def test_all_is_sorted_and_importable():
    assert vecserve.__all__ == sorted(vecserve.__all__)
    for name in vecserve.__all__:
        assert getattr(vecserve, name) is not None, name


def test_lazy_export_is_the_real_class():
    from vecserve.keyedvectors import AsyncRedisKeyedVectors, RedisKeyedVectors

    assert vecserve.RedisKeyedVectors is RedisKeyedVectors
    assert vecserve.AsyncRedisKeyedVectors is AsyncRedisKeyedVectors


def test_every_exception_lives_in_errors_under_the_root():
    """One hierarchy: every exception class vecserve defines is in vecserve.errors, under
    VecserveError, and exported from the package."""
    import importlib
    import inspect
    import pkgutil

    from vecserve.errors import VecserveError

    defined = []
    for mod in pkgutil.walk_packages(vecserve.__path__, "vecserve."):
        if mod.name.endswith("__main__"):
            continue
        module = importlib.import_module(mod.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == mod.name:
                defined.append(obj)
    assert defined, "walked no modules"
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in defined if c.__module__ != "vecserve.errors"
    ]
    assert outside == []
    for cls in defined:
        assert issubclass(cls, VecserveError), cls
        assert cls.__name__ in vecserve.__all__, cls
