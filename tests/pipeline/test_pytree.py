"""The structures models take and return, taken apart and rebuilt with their own types."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple

import pytest
import torch

from lightning_streamprof.pipeline import pytree as tree

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Box:
    x: torch.Tensor
    name: str = "box"


class Plain:
    def __init__(self, t: torch.Tensor) -> None:
        self.mean, self.std, self.scale, self.deterministic = t, t * 2, 3.0, False


def structures():
    t = torch.arange(4.0)
    out = [t, (t, 1), [t, "s"], {"k": t, "n": None}, OrderedDict(a=t), Pair(t, t + 1), Box(t), Plain(t),
           {"nested": [Box(t), Pair(t, 2)]}]
    transformers = pytest.importorskip("transformers")
    out.append(transformers.modeling_outputs.BaseModelOutputWithPooling(last_hidden_state=t, pooler_output=t + 1))
    out.append(transformers.BatchEncoding({"input_ids": t.long(), "attention_mask": t.bool()}))
    return out


@pytest.mark.parametrize("index", range(11))
def test_flatten_then_unflatten_rebuilds_the_same_type_and_values(index):
    obj = structures()[index]
    spec, leaves = tree.flatten(obj)
    again = spec.unflatten(leaves)
    assert type(again) is type(obj)
    assert [tuple(p) for p, _ in tree.leaves_with_paths(again)] == [tuple(p) for p, _ in tree.leaves_with_paths(obj)]
    for path, t in tree.leaves_with_paths(obj):
        assert torch.equal(tree.follow(again, path), t)
    assert tree.flatten(again)[0] == spec


@pytest.mark.parametrize("index", range(11))
def test_map_tensors_makes_new_tensors_in_a_new_container_and_leaves_the_original(index):
    obj = structures()[index]
    before = [t for t in tree.tensors(obj)]
    mapped = tree.map_tensors(torch.clone, obj)
    assert type(mapped) is type(obj)
    new = tree.tensors(mapped)
    assert len(new) == len(before) > 0
    assert all(a is not b and torch.equal(a, b) for a, b in zip(new, before))
    assert all(a is b for a, b in zip(tree.tensors(obj), before))  # the original still holds its own


def test_paths_read_like_code():
    obj = {"image": torch.zeros(1), "out": Plain(torch.ones(1))}
    paths = [tree.describe_path("batch", p) for p, _ in tree.leaves_with_paths(obj)]
    assert paths == ["batch['image']", "batch['out'].mean", "batch['out'].std"]


def test_specs_differ_when_keys_or_leaf_kinds_differ():
    t = torch.zeros(2)
    assert tree.flatten({"a": t})[0] != tree.flatten({"b": t})[0]
    assert tree.flatten((t,))[0] != tree.flatten((1,))[0]
    assert tree.flatten(((t,), {"m": t}))[0] == tree.flatten(((t + 1,), {"m": t}))[0]
