"""Sharding value types: Shardy syntax out, Shardy syntax back in."""

import pytest

from shard_opt.errors import UserError
from shard_opt.sharding import AxisRef, Mesh, TensorSharding


def test_mesh_parse_and_print():
    m = Mesh.parse("2x4")
    assert m.shape == (2, 4) and m.axes == ("batch", "model") and m.num_devices == 8
    assert str(m) == 'sdy.mesh @mesh = <["batch"=2, "model"=4]>'
    assert Mesh.parse("8").shape == (1, 8)


@pytest.mark.parametrize("spec", ["3x0", "abc", "", "2x", "x4", "-2x4"])
def test_mesh_rejects_bad_specs(spec):
    with pytest.raises(UserError):
        Mesh.parse(spec)


def test_unsupported_mesh_names_the_supported_ones():
    with pytest.raises(UserError, match="2x4") as e:
        Mesh.parse("3x3").check_supported()
    assert "4668" in str(e.value)


def test_tensor_sharding_round_trip():
    text = '#sdy.sharding<@mesh, [{"model"}, {}]>'
    s = TensorSharding.parse(text)
    assert s.axis_names() == [["model"], []]
    assert s.to_attr() == text
    assert s.local_shape((256, 64), Mesh((2, 4))) == (64, 64)


def test_parse_what_shardy_prints():
    # sub-axes, open dims and several axes on one dim, as propagation may print them
    s = TensorSharding.parse('<@mesh, [{"batch", "model":(1)2}, {?}, {}]>')
    assert s.dims[0] == (AxisRef("batch"), AxisRef("model", 1, 2))
    assert s.open_dims == frozenset({1})
    assert s.local_shape((16, 8, 3), Mesh((2, 4))) == (4, 8, 3)
    assert s.body() == '<@mesh, [{"batch", "model":(1)2}, {?}, {}]>'
