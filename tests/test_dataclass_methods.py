"""``autoselect.dataclass_methods.DataclassMethods`` writes ``__repr__`` and ``__eq__`` once for the
mutable records a fast start creates; each behaves exactly as ``@dataclass`` would generate it.
Every class that uses it is compared with its twin, a plain ``@dataclass`` of the same fields
(names, order, repr/compare flags) that generates them.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

from support.paths import REPO

from autoselect.check import CheckReport
from autoselect.dataclass_methods import DataclassMethods
from autoselect.hardware import GpuInfo, HostFingerprint
from autoselect.vllm_flags.command import Command
from autoselect.vllm_flags.serve_args import ServeArgs
from db.queries import StoredResult
from db.records import Result
from db.tuned import TunedConfig

RECORDS = (Result, StoredResult, TunedConfig, GpuInfo, HostFingerprint, ServeArgs, Command, CheckReport)


def _users() -> set[type]:
    """Every class below DataclassMethods that the imported modules define."""
    out, todo = set(), [DataclassMethods]
    while todo:
        for sub in todo.pop().__subclasses__():
            out.add(sub)
            todo.append(sub)
    return out


def _twin(cls):
    """``cls``'s fields as a plain dataclass of the same name that generates every method."""
    spec = [(f.name, f.type, dataclasses.field(init=f.init, repr=f.repr, compare=f.compare, hash=f.hash))
            for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=cls.__dataclass_params__.frozen)


def _pair(cls, **values):
    """An instance of ``cls`` and of its twin holding the same values."""
    given = {f.name: values.get(f.name, f"{f.name} value") for f in dataclasses.fields(cls) if f.init}
    return cls(**given), _twin(cls)(**given)


def test_every_record_that_writes_its_methods_once_is_checked_here():
    from autoselect.selector import answer

    documents = {cls for cls in _users() if issubclass(cls, answer._Document)}  # tests/selector/test_answer_methods.py
    assert _users() - documents - {answer._Document} == set(RECORDS)
    declared = {m for package in ("autoselect", "db", "bench") for path in (REPO / package).rglob("*.py")
                for m in re.findall(r"^class (\w+)\(DataclassMethods\)", path.read_text(), flags=re.M)}
    assert declared == {cls.__name__ for cls in RECORDS if DataclassMethods in cls.__bases__} | {"_Document"}
    for cls in RECORDS:
        assert dataclasses.is_dataclass(cls) and "__repr__" not in vars(cls) and "__eq__" not in vars(cls)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_repr_is_the_one_dataclass_generates(cls):
    record, twin = _pair(cls)
    assert repr(record) == repr(twin)
    assert repr(record).startswith(f"{cls.__qualname__}(")


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_equality_is_the_one_dataclass_generates(cls):
    record, _ = _pair(cls)
    name = next(f.name for f in dataclasses.fields(cls) if f.init)
    other, _ = _pair(cls, **{name: "another value"})
    assert record == _pair(cls)[0] and not record != _pair(cls)[0]
    assert record != other and (record == other) is False
    assert record == copy.copy(record)
    assert record.__eq__(tuple(getattr(record, f.name) for f in dataclasses.fields(cls))) is NotImplemented
    unrelated = next(c for c in RECORDS if c is not cls and not issubclass(c, cls) and not issubclass(cls, c))
    assert record.__eq__(_pair(unrelated)[0]) is NotImplemented


def test_a_subclass_is_never_equal_to_its_base_as_with_dataclass():
    fields = {f.name: f"{f.name} value" for f in dataclasses.fields(Result)}
    assert Result(**fields).__eq__(StoredResult(**fields)) is NotImplemented
    assert Result(**fields) != StoredResult(**fields)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_records_stay_unhashable_as_mutable_dataclasses_are(cls):
    record, twin = _pair(cls)
    assert cls.__hash__ is None and type(twin).__hash__ is None
    with pytest.raises(TypeError, match="unhashable"):
        hash(record)


def test_repr_of_a_record_that_holds_itself_does_not_recurse():
    record, _ = _pair(GpuInfo)
    record.name = record
    assert "name=...," in repr(record)
