"""vecserve.train.params: every parameter's one default, its check, and the CLI built on it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from vecserve.errors import TrainingError
from vecserve.train import Word2Vec
from vecserve.train.cli import train as train_command
from vecserve.train.params import SyncParams, TrainParams, option_fields


def test_the_command_offers_every_parameter_with_the_librarys_default():
    """``vecserve train``'s options are the library's parameters: same names, same
    defaults, except where the table says the command differs (skip-gram)."""
    options = {p.name: p for p in train_command.params}
    for f in option_fields():
        assert f.name in options, f"vecserve train has no option for {f.name}"
        want = f.metadata.get("cli_default", f.default)
        got = options[f.name].default
        assert got == want or (got is False and want == 0), (f.name, got, want)
        assert options[f.name].help == f.metadata["help"]
    assert options["sg"].default is True  # the command trains skip-gram unless --cbow


def test_word2vec_signature_lists_the_parameters_with_their_defaults():
    sig = inspect.signature(Word2Vec).parameters
    for cls in (TrainParams, SyncParams):
        for f in dataclasses.fields(cls):
            assert sig[f.name].default == f.default
            assert sig[f.name].kind is inspect.Parameter.KEYWORD_ONLY
    model = Word2Vec(window=3, sync_depth=2)
    assert (model.window, model.sync_depth, model.vector_size) == (3, 2, 100)
    with pytest.raises(AttributeError):
        model.window = 4  # fixed once the model is made


def test_alpha_follows_word2vec_c_by_mode():
    assert TrainParams(sg=1).alpha == 0.025
    assert TrainParams(sg=0).alpha == 0.05
    assert TrainParams(sg=0, alpha=0.01).alpha == 0.01


def test_a_bad_parameter_is_a_collective_error_naming_it():
    with pytest.raises(TrainingError, match=r"sync_cap=0.5: must be >= 1") as err:
        SyncParams(sync_cap=0.5)
    assert err.value.collective
    with pytest.raises(TrainingError, match="window=0") as err:
        Word2Vec(window=0)
    assert err.value.collective
    assert not TrainingError("a thread failed").collective


def test_an_unknown_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="windw"):
        Word2Vec(windw=3)
