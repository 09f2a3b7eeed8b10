"""The answer's dataclasses write their own ``__repr__`` (and, frozen, ``__eq__`` and ``__hash__``)
once, in ``answer._Document``, instead of having ``@dataclass`` generate them per class: each
behaves exactly as the generated one would. Every class is compared with its twin, a plain
``@dataclass`` of the same fields (same names, same order, same frozenness) that generates them.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect

import pytest

from autoselect.selector import answer

DOCUMENTS = sorted((cls for _, cls in inspect.getmembers(answer, inspect.isclass)
                    if issubclass(cls, answer._Document) and cls is not answer._Document), key=lambda c: c.__name__)


def _twin(cls):
    """``cls``'s fields as a plain dataclass of the same name that generates every method."""
    spec = [(f.name, f.type, dataclasses.field(init=f.init, repr=f.repr, compare=f.compare, hash=f.hash))
            for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=cls.__dataclass_params__.frozen)


def _pair(cls, **values):
    """An instance of ``cls`` and of its twin holding the same values (strings, so hashable)."""
    fields = dataclasses.fields(cls)
    given = {f.name: values.get(f.name, f"{f.name} value") for f in fields if f.init}
    if cls is answer.Recommendation:
        given["candidates"] = ()  # its __post_init__ walks the candidates
    doc, twin = cls(**given), _twin(cls)(**given)
    for f in fields:
        if not f.init:
            object.__setattr__(twin, f.name, getattr(doc, f.name))
    return doc, twin


def test_every_class_of_the_answer_is_a_document():
    assert len(DOCUMENTS) == 15
    assert all(dataclasses.is_dataclass(cls) for cls in DOCUMENTS)


@pytest.mark.parametrize("cls", DOCUMENTS, ids=lambda c: c.__name__)
def test_repr_is_the_one_dataclass_generates(cls):
    doc, twin = _pair(cls)
    assert repr(doc) == repr(twin)
    assert repr(doc).startswith(f"{cls.__qualname__}(")


@pytest.mark.parametrize("cls", DOCUMENTS, ids=lambda c: c.__name__)
def test_equality_is_the_one_dataclass_generates(cls):
    doc, _ = _pair(cls)
    same, _ = _pair(cls)
    name = next(f.name for f in dataclasses.fields(cls) if f.init)
    other, _ = _pair(cls, **{name: "another value"})
    assert doc == same and not doc != same
    assert doc != other and (doc == other) is False
    assert doc == copy.copy(doc)
    assert doc.__eq__(_pair(next(c for c in DOCUMENTS if c is not cls))[0]) is NotImplemented
    assert doc.__eq__(tuple(getattr(doc, f.name) for f in dataclasses.fields(cls))) is NotImplemented


@pytest.mark.parametrize("cls", DOCUMENTS, ids=lambda c: c.__name__)
def test_hash_is_the_one_dataclass_generates(cls):
    doc, twin = _pair(cls)
    if cls.__dataclass_params__.frozen:
        assert hash(doc) == hash(twin)
        assert hash(doc) == hash(_pair(cls)[0])
    else:
        assert cls.__hash__ is None and type(twin).__hash__ is None
        with pytest.raises(TypeError, match="unhashable"):
            hash(doc)


def test_frozen_documents_stay_frozen():
    doc, _ = _pair(answer.BucketValue)
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.note = "changed"


def test_repr_of_a_document_that_holds_itself_does_not_recurse():
    doc, _ = _pair(answer.Rejection)
    doc.reasons = [doc]
    assert repr(doc) == "Rejection(backend='backend value', kind='kind value', reasons=[...])"
