"""Behaviour of host_stubs/ttnn, the import-only ttnn used on hosts without tt-metal.

Run with the stub on the path: ``PYTHONPATH=host_stubs pytest tests/unit/test_host_stub.py``.
The expected tables are real ttnn 0.81.1's; tests/stub_parity checks the stub against the real
wheel itself.
"""

from __future__ import annotations

import copy
import enum
import importlib
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import ttnn

FABRIC_CONFIG = {
    "DISABLED": 0,
    "FABRIC_1D_NEIGHBOR_EXCHANGE": 1,
    "FABRIC_1D": 2,
    "FABRIC_1D_RING": 3,
    "FABRIC_2D": 4,
    "FABRIC_2D_TORUS_X": 5,
    "FABRIC_2D_TORUS_Y": 6,
    "FABRIC_2D_TORUS_XY": 7,
    "CUSTOM": 8,
}
FABRIC_RELIABILITY_MODE = {"STRICT_INIT": 0, "RELAXED_INIT": 1, "DYNAMIC_RECONFIG": 2}
DISPATCH_CORE_AXIS = {"ROW": 0, "COL": 1}
DISPATCH_CORE_TYPE = {"WORKER": 0, "ETH": 1}
CLUSTER_TYPE = {
    "INVALID": 0,
    "N150": 1,
    "N300": 2,
    "T3K": 3,
    "GALAXY": 4,
    "TG": 5,
    "P100": 6,
    "P150": 7,
    "P150_X2": 8,
    "P150_X4": 9,
    "SIMULATOR_WORMHOLE_B0": 10,
    "SIMULATOR_BLACKHOLE": 11,
    "N300_2x2": 12,
    "P150_X8": 13,
    "P300": 14,
    "SIMULATOR_QUASAR": 15,
    "BLACKHOLE_GALAXY": 16,
    "P300_X2": 17,
    "CUSTOM": 18,
}
ENUMS: list[tuple[type[enum.Enum], dict[str, int]]] = [
    (ttnn.FabricConfig, FABRIC_CONFIG),
    (ttnn.FabricReliabilityMode, FABRIC_RELIABILITY_MODE),
    (ttnn.DispatchCoreAxis, DISPATCH_CORE_AXIS),
    (ttnn.DispatchCoreType, DISPATCH_CORE_TYPE),
    (ttnn.cluster.ClusterType, CLUSTER_TYPE),
]
ENUM_IDS = [e.__name__ for e, _ in ENUMS]


def test_the_stub_is_what_is_imported() -> None:
    assert ttnn.__version__.endswith("+host.stub")
    assert Path(ttnn.__file__).parent.parent.name == "host_stubs"


# --- enums ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("enum_type", "expected"), ENUMS, ids=ENUM_IDS)
def test_enum_members_and_values(enum_type: type[enum.Enum], expected: dict[str, int]) -> None:
    assert {member.name: member.value for member in enum_type} == expected
    assert list(enum_type.__members__) == [member.name for member in enum_type]


@pytest.mark.parametrize(("enum_type", "expected"), ENUMS, ids=ENUM_IDS)
def test_enum_lookup_by_name_and_value(
    enum_type: type[enum.Enum], expected: dict[str, int]
) -> None:
    for name, value in expected.items():
        member = enum_type[name]
        assert member is getattr(enum_type, name)
        assert member is enum_type.__members__[name]
        assert member is enum_type(value)
        assert (member.name, member.value) == (name, value)
    # Lookup is exact, as in real ttnn: a config parser must normalise case itself.
    with pytest.raises(KeyError):
        enum_type["no_such_member"]
    with pytest.raises(ValueError, match="is not a valid"):
        enum_type(max(expected.values()) + 100)


def test_enum_members_are_hashable_values_but_not_ints() -> None:
    ring = ttnn.FabricConfig.FABRIC_1D_RING
    assert ring == ttnn.FabricConfig["FABRIC_1D_RING"]
    assert ring != ttnn.FabricConfig.FABRIC_1D
    assert {ring: "ring"}[ttnn.FabricConfig["FABRIC_1D_RING"]] == "ring"
    assert ring.value == 3
    # Real ttnn's nanobind enums are plain Enums: int() fails and members never equal ints.
    assert ring != 3
    with pytest.raises(TypeError):
        int(ring)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        ring < ttnn.FabricConfig.FABRIC_2D  # type: ignore[operator]  # noqa: B015
    assert ttnn.DispatchCoreAxis.ROW != ttnn.DispatchCoreType.WORKER  # same value, other enum


def test_enum_text_forms_match_nanobind() -> None:
    assert repr(ttnn.FabricConfig.FABRIC_1D) == "FabricConfig.FABRIC_1D"
    assert str(ttnn.cluster.ClusterType.N150) == "ClusterType.N150"
    assert f"{ttnn.DispatchCoreAxis.COL}" == "DispatchCoreAxis.COL"


def test_enums_survive_pickling() -> None:
    mode = ttnn.FabricReliabilityMode.RELAXED_INIT
    assert pickle.loads(pickle.dumps(mode)) is mode


# --- MeshShape -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "dims"),
    [
        ((2, 4), {}, (2, 4)),
        ((1, 8, 2), {}, (1, 8, 2)),
        (([1, 32],), {}, (1, 32)),
        (((8,),), {}, (8,)),
        ((range(2, 4),), {}, (2, 3)),
        (([1, 2, 3, 4],), {}, (1, 2, 3, 4)),
        ((), {"s0": 4, "s1": 8}, (4, 8)),
        ((2,), {"s1": 4}, (2, 4)),
        ((), {"shape": [2, 2]}, (2, 2)),
        ((0, 4), {}, (0, 4)),
        ((True, 4), {}, (1, 4)),
    ],
)
def test_mesh_shape_constructors(
    args: tuple[object, ...], kwargs: dict[str, object], dims: tuple[int, ...]
) -> None:
    shape = ttnn.MeshShape(*args, **kwargs)
    assert tuple(shape) == dims
    assert shape.dims() == len(dims)
    assert repr(shape) == str(shape) == f"MeshShape({list(dims)})"


def test_mesh_shape_from_another_mesh_shape() -> None:
    assert ttnn.MeshShape(ttnn.MeshShape(4, 8)) == ttnn.MeshShape(4, 8)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((2,), {}),
        ((1, 2, 3, 4), {}),
        ((-1, 4), {}),
        ((2.0, 4), {}),
        (("2", 4), {}),
        ((2**32, 1), {}),
        ((None, 1), {}),
        (("ab",), {}),
        ((iter([1, 8]),), {}),
        (({1: 2},), {}),
        (([1.0, 2],), {}),
        (([2, 4], 1), {}),
        ((), {"s0": 1}),
        ((), {"rows": 1, "cols": 8}),
    ],
)
def test_mesh_shape_rejects_bad_arguments_with_type_error(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    with pytest.raises(TypeError, match="incompatible function arguments"):
        ttnn.MeshShape(*args, **kwargs)


def test_mesh_shape_with_no_dimensions_raises_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="0 dimension"):
        ttnn.MeshShape([])


def test_mesh_shape_accessors() -> None:
    shape = ttnn.MeshShape(4, 8)
    assert (shape[0], shape[1], shape[-1], shape[-2]) == (4, 8, 8, 4)
    assert list(shape) == [4, 8]
    assert 8 in shape
    assert shape.mesh_size() == 32
    assert ttnn.MeshShape(2, 3, 5).mesh_size() == 30
    assert ttnn.MeshShape(0, 8).mesh_size() == 0
    assert ttnn.MeshShape(65536, 65536).mesh_size() == 2**32  # no uint32 wrap-around
    rows, cols = shape
    assert (rows, cols) == (4, 8)


@pytest.mark.parametrize(
    ("dims", "index"), [((4, 8), 2), ((4, 8), 100), ((4, 8), -5), ((8,), -5), ((1, 2, 3, 4, 5), -6)]
)
def test_mesh_shape_index_out_of_range_is_a_runtime_error(
    dims: tuple[int, ...], index: int
) -> None:
    # Real ttnn raises a TT_THROW (RuntimeError) here, not IndexError.
    with pytest.raises(RuntimeError, match="out of range"):
        ttnn.MeshShape(dims)[index]


def test_mesh_shape_reads_as_padded_to_rank_four_with_leading_ones() -> None:
    # Real ttnn quirk: negative indices past the rank, down to -4, are valid and give 1.
    shape = ttnn.MeshShape(4, 8)
    assert [shape[i] for i in (-4, -3, -2, -1)] == [1, 1, 4, 8]
    assert ttnn.MeshShape([8])[-4] == 1
    assert ttnn.MeshShape([1, 2, 3, 4, 5])[-5] == 1  # rank >= 4: plain negative indexing
    assert list(shape) == [4, 8]  # iteration is not padded


@pytest.mark.parametrize("index", [1.0, "0", slice(0, 1)])
def test_mesh_shape_index_must_be_an_int(index: object) -> None:
    with pytest.raises(TypeError):
        ttnn.MeshShape(4, 8)[index]  # type: ignore[index]


def test_mesh_shape_equality() -> None:
    assert ttnn.MeshShape(2, 4) == ttnn.MeshShape([2, 4])
    assert (ttnn.MeshShape(2, 4) != ttnn.MeshShape([2, 4])) is False  # __ne__ is its own method
    assert ttnn.MeshShape(2, 4) != ttnn.MeshShape(4, 2)
    assert ttnn.MeshShape(2, 4) != ttnn.MeshShape(2, 4, 1)


@pytest.mark.parametrize("other", [(2, 4), [2, 4], None, 8])
def test_mesh_shape_compares_only_with_mesh_shapes(other: object) -> None:
    shape = ttnn.MeshShape(2, 4)
    with pytest.raises(TypeError):
        shape == other  # noqa: B015
    with pytest.raises(TypeError):
        shape != other  # noqa: B015


def test_mesh_shape_hashes_by_identity_like_real_ttnn() -> None:
    a, b = ttnn.MeshShape(2, 4), ttnn.MeshShape(2, 4)
    assert a == b
    assert {a: "a"}.get(b) is None  # equal shapes are different dict keys
    assert {a: "a"}[a] == "a"


def test_mesh_shape_has_no_len_order_pickle_copy_or_new_attributes() -> None:
    shape = ttnn.MeshShape(2, 4)
    with pytest.raises(TypeError):
        len(shape)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shape < ttnn.MeshShape(4, 2)  # type: ignore[operator]  # noqa: B015
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(shape)
    with pytest.raises(TypeError, match="pickle"):
        copy.copy(shape)
    with pytest.raises(AttributeError):
        shape.rows = 4  # type: ignore[attr-defined]


# --- calls that would reach a device ---------------------------------------------------------

CHIP_CALLS: dict[str, Callable[[], object]] = {
    "open_mesh_device": lambda: ttnn.open_mesh_device(
        ttnn.MeshShape(1, 8),
        l1_small_size=32768,
        trace_region_size=23887872,
        num_command_queues=1,
        worker_l1_size=1345000,
    ),
    "open_mesh_device()": lambda: ttnn.open_mesh_device(),
    "set_fabric_config": lambda: ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D),
    "set_fabric_config(kwargs)": lambda: ttnn.set_fabric_config(
        config=ttnn.FabricConfig.FABRIC_1D_RING,
        reliability_mode=ttnn.FabricReliabilityMode.RELAXED_INIT,
        num_planes=2,
    ),
    "get_fabric_config": lambda: ttnn.get_fabric_config(),
    "get_device_ids": lambda: ttnn.get_device_ids(),
    "get_num_devices": lambda: ttnn.get_num_devices(),
    "GetNumAvailableDevices": lambda: ttnn.GetNumAvailableDevices(),
    "get_num_pcie_devices": lambda: ttnn.get_num_pcie_devices(),
    "GetNumPCIeDevices": lambda: ttnn.GetNumPCIeDevices(),
    "get_pcie_device_ids": lambda: ttnn.get_pcie_device_ids(),
    "get_max_worker_l1_unreserved_size": lambda: ttnn.get_max_worker_l1_unreserved_size(),
    "DispatchCoreConfig()": lambda: ttnn.DispatchCoreConfig(),
    "DispatchCoreConfig(type, axis)": lambda: ttnn.DispatchCoreConfig(
        ttnn.DispatchCoreType.WORKER, ttnn.DispatchCoreAxis.COL
    ),
    "DispatchCoreConfig(axis=)": lambda: ttnn.DispatchCoreConfig(axis=ttnn.DispatchCoreAxis.ROW),
    "cluster.get_cluster_type": lambda: ttnn.cluster.get_cluster_type(),
    "device.GetNumAvailableDevices": lambda: ttnn.device.GetNumAvailableDevices(),
}

# Calls that take a MeshDevice: without chips there is no handle to give them, so real ttnn
# fails argument conversion with TypeError; the stub does the same.
HANDLE_CALLS: dict[str, Callable[[object], object]] = {
    "close_mesh_device": lambda d: ttnn.close_mesh_device(d),
    "synchronize_device": lambda d: ttnn.synchronize_device(d),
    "ReadDeviceProfiler": lambda d: ttnn.ReadDeviceProfiler(d),
    "device.synchronize_device": lambda d: ttnn.device.synchronize_device(d, cq_id=0),
}


@pytest.mark.parametrize("call", CHIP_CALLS.values(), ids=CHIP_CALLS.keys())
def test_device_calls_raise_runtime_error(call: Callable[[], object]) -> None:
    with pytest.raises(RuntimeError, match="No chips detected"):
        call()


@pytest.mark.parametrize("call", HANDLE_CALLS.values(), ids=HANDLE_CALLS.keys())
@pytest.mark.parametrize("handle", [None, object()], ids=["None", "object"])
def test_device_handle_calls_raise_type_error(
    call: Callable[[object], object], handle: object
) -> None:
    with pytest.raises(TypeError, match="MeshDevice"):
        call(handle)


def test_mesh_device_cannot_be_constructed() -> None:
    with pytest.raises(TypeError, match="no constructor"):
        ttnn.MeshDevice(ttnn.MeshShape(1, 1))


@pytest.mark.parametrize(
    "call",
    [
        lambda: ttnn.set_fabric_config("FABRIC_1D"),
        lambda: ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D, "RELAXED_INIT"),
        lambda: ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D, num_planes="2"),
        lambda: ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D, topology=1),
        lambda: ttnn.set_fabric_config(),
        lambda: ttnn.DispatchCoreConfig("WORKER"),
        lambda: ttnn.DispatchCoreConfig(axis="col"),
        lambda: ttnn.open_mesh_device(ttnn.MeshShape(1, 1), l1_size=1024),
        lambda: ttnn.cluster.get_cluster_type(1),
    ],
    ids=[
        "fabric-config-as-string",
        "reliability-mode-as-string",
        "num-planes-as-string",
        "unknown-fabric-keyword",
        "fabric-config-missing",
        "dispatch-type-as-string",
        "dispatch-axis-as-string",
        "unknown-open-keyword",
        "cluster-type-extra-arg",
    ],
)
def test_bad_arguments_fail_with_type_error_before_the_device_check(
    call: Callable[[], object],
) -> None:
    # Real ttnn checks argument types before it probes the cluster.
    with pytest.raises(TypeError):
        call()


# --- module layout ---------------------------------------------------------------------------


def test_cluster_is_an_attribute_not_an_importable_submodule() -> None:
    from ttnn import cluster

    assert cluster.ClusterType.T3K.value == 3
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ttnn.cluster")


def test_device_submodule_defaults_and_shared_types() -> None:
    import ttnn.device

    assert ttnn.device.DEFAULT_L1_SMALL_SIZE == 0
    assert ttnn.device.DEFAULT_TRACE_REGION_SIZE == 0
    assert ttnn.device.DispatchCoreConfig is ttnn.DispatchCoreConfig
    assert ttnn.device.DispatchCoreType is ttnn.DispatchCoreType


@pytest.mark.parametrize("name", ["get_arch_name", "is_wormhole_b0", "is_blackhole"])
def test_no_answer_for_arch_queries(name: str) -> None:
    # Real ttnn answers these without chips ("invalid", False); a stub answering them would be a
    # fake that works, so they are absent and a caller fails with AttributeError.
    assert not hasattr(ttnn, name)
    assert not hasattr(ttnn.device, name)


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in vars(ttnn) if not n.startswith("_")}
    assert set(ttnn.__all__) == public
