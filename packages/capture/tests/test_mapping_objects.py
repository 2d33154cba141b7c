"""Objects of user dict subclasses and of classes with a Python ``__setattr__``, made in
the trace (the ``ModelOutput`` programs of the corpus use both together)."""

from __future__ import annotations

import collections

import torch


class Bag(dict):
    """A dict subclass with no methods of its own."""


class Record(collections.OrderedDict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)


class Tracked:
    def __init__(self, x):
        self.x = x

    def __setattr__(self, name, value):
        object.__setattr__(self, "last", name)
        object.__setattr__(self, name, value)


def uses_bag(x):
    bag = Bag(a=x + 1)
    bag["b"] = x * 2
    bag.note = "n"
    return bag, len(bag), sorted(bag), bag.get("c", 0), bag.note


def uses_record(x):
    record = Record()
    record["h"] = x
    return record, record["h"] - x, [key for key, _ in record.items()]


def uses_tracked(x):
    t = Tracked(x)
    t.y = x + 1
    return t.x + t.y, t.last


def test_dict_subclass_object_in_one_graph(captured, against_eager):
    result, _ = captured(uses_bag, torch.randn(3))
    bag = against_eager(result, uses_bag, torch.randn(3))[0]
    assert type(bag) is Bag and bag.note == "n" and list(bag) == ["a", "b"]


def test_setitem_through_super_of_an_ordered_dict(captured, against_eager):
    result, _ = captured(uses_record, torch.randn(3))
    record = against_eager(result, uses_record, torch.randn(3))[0]
    assert type(record) is Record and list(record) == ["h"]


def test_python_setattr_is_inlined(captured, against_eager):
    result, _ = captured(uses_tracked, torch.randn(3))
    _, last = against_eager(result, uses_tracked, torch.randn(3))
    assert last == "y"


class Mirrored(collections.OrderedDict):
    """OrderedDict's __init__, update and setdefault go through this; dict's do not."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        object.__setattr__(self, key, value)


class MirroredDict(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value + 1)


def uses_mirrored(x):
    m = Mirrored(a=x)
    m.update(b=x * 2)
    m.setdefault("c", x * 3)
    d = MirroredDict(a=x)  # dict.__init__ skips the override
    d["b"] = x
    return m.a + m.b + m.c, list(m), d["a"], d["b"]


def test_ordered_dict_init_and_update_store_through_the_class(captured, against_eager):
    result, _ = captured(uses_mirrored, torch.randn(3))
    against_eager(result, uses_mirrored, torch.randn(3))
