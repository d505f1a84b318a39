"""host_stubs/ttnn against the real ttnn wheel, on a host with no Tenstorrent chips.

Run in a Python 3.12 (or 3.10) env holding the real ttnn wheel and no torch: ``tox -e
stub-parity``. The stub is loaded from its file path as ``ttnn_host_stub``, so both live in one
process. Checks: every public stub name exists in real ttnn with the same kind and keyword names;
enums have the same members, values, order and text forms; MeshShape behaves the same for the
same inputs; every device call the stub refuses raises in real ttnn too, with the same exception
type.
"""

from __future__ import annotations

import copy
import enum
import importlib
import importlib.metadata
import importlib.util
import inspect
import pickle
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

STUB_DIR = Path(__file__).resolve().parents[2] / "host_stubs" / "ttnn"
STUB_NAME = "ttnn_host_stub"


def _load_stub() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        STUB_NAME, STUB_DIR / "__init__.py", submodule_search_locations=[str(STUB_DIR)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[STUB_NAME] = module  # the stub's relative imports resolve through sys.modules
    spec.loader.exec_module(module)
    return module


stub = _load_stub()
import ttnn as real  # noqa: E402 - after the stub, so a stub on PYTHONPATH cannot shadow it

# (stub module, real module) pairs whose public names the stub claims.
MODULE_PAIRS = [(stub, real), (stub.device, real.device), (stub.cluster, real.cluster)]
MODULE_IDS = ["ttnn", "ttnn.device", "ttnn.cluster"]


def test_real_ttnn_is_the_wheel_and_imports_without_torch() -> None:
    # The stub marks its version; whether a ttnn release sets __version__ is its own business.
    assert not getattr(real, "__version__", "").endswith("+host.stub"), "imported the stub"
    assert hasattr(real, "_ttnn")
    assert Path(real.__file__).parent.parent.name == "site-packages"
    assert importlib.metadata.version("ttnn")
    assert "torch" not in sys.modules
    assert stub.__version__.endswith("+host.stub")


def _public(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    for name, value in vars(module).items():
        # `annotations` is what `from __future__ import annotations` binds, not a stub name.
        if not name.startswith("_") and name != "annotations":
            yield name, value


@pytest.mark.parametrize(("stub_mod", "real_mod"), MODULE_PAIRS, ids=MODULE_IDS)
def test_every_stub_name_exists_in_real_ttnn_with_the_same_kind(
    stub_mod: types.ModuleType, real_mod: types.ModuleType
) -> None:
    for name, value in _public(stub_mod):
        assert hasattr(real_mod, name), f"{real_mod.__name__} has no {name}"
        real_value = getattr(real_mod, name)
        if isinstance(value, types.ModuleType):
            assert isinstance(real_value, types.ModuleType), name
        elif isinstance(value, type) and issubclass(value, enum.Enum):
            assert isinstance(real_value, type) and issubclass(real_value, enum.Enum), name
        elif isinstance(value, type):
            assert isinstance(real_value, type), name
        elif callable(value):
            assert callable(real_value) and not isinstance(real_value, type), name
        else:
            assert value == real_value, name


def test_cluster_is_an_attribute_in_both_not_an_importable_submodule() -> None:
    for name in ("ttnn.cluster", f"{STUB_NAME}.cluster"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(name)


# --- keyword names -------------------------------------------------------------------------


def _nb_param_names(signature: str) -> list[str]:
    """Parameter names from a nanobind signature line 'def f(a: T = \\0, b: U) -> R'."""
    inner = signature[signature.index("(") + 1 :]
    depth, part, parts = 0, "", []
    for ch in inner:
        if ch in "([" or (ch == ")" and depth > 0) or ch == "]":
            depth += 1 if ch in "([" else -1
        elif ch == ")" and depth == 0:
            break
        elif ch == "," and depth == 0:
            parts.append(part)
            part = ""
            continue
        part += ch
    parts.append(part)
    names = [p.split(":")[0].split("=")[0].strip() for p in parts]
    return [n for n in names if n and n not in ("self", "/", "*")]


def _param_names(fn: Callable[..., object]) -> list[str]:
    try:
        params = inspect.signature(fn).parameters
    except ValueError:  # a nanobind function: read the binding's own signature
        overloads = fn.__nb_signature__  # type: ignore[attr-defined]
        assert len(overloads) == 1, f"{fn} is overloaded"
        return _nb_param_names(overloads[0][0])
    return [n for n in params if n != "self"]


def _stub_functions() -> Iterator[tuple[str, Callable[..., object], Callable[..., object]]]:
    for (stub_mod, real_mod), mod_id in zip(MODULE_PAIRS, MODULE_IDS, strict=True):
        for name, value in _public(stub_mod):
            if inspect.isfunction(value):
                yield f"{mod_id}.{name}", value, getattr(real_mod, name)
    yield "DispatchCoreConfig", stub.DispatchCoreConfig.__init__, real.DispatchCoreConfig.__init__


FUNCTIONS = list(_stub_functions())


@pytest.mark.parametrize(
    ("stub_fn", "real_fn"), [f[1:] for f in FUNCTIONS], ids=[f[0] for f in FUNCTIONS]
)
def test_keyword_names_match(
    stub_fn: Callable[..., object], real_fn: Callable[..., object]
) -> None:
    assert _param_names(stub_fn) == _param_names(real_fn)


def test_open_mesh_device_int_defaults_match() -> None:
    real_params = inspect.signature(real.open_mesh_device).parameters
    stub_params = inspect.signature(stub.open_mesh_device).parameters
    for name, param in real_params.items():
        if type(param.default) is int:
            assert stub_params[name].default == param.default, name


# --- enums ---------------------------------------------------------------------------------

ENUM_PATHS = [
    "FabricConfig",
    "FabricReliabilityMode",
    "DispatchCoreAxis",
    "DispatchCoreType",
    "cluster.ClusterType",
]


def _resolve(module: types.ModuleType, path: str) -> type[enum.Enum]:
    value: object = module
    for part in path.split("."):
        value = getattr(value, part)
    assert isinstance(value, type) and issubclass(value, enum.Enum)
    return value


def test_every_stub_enum_is_checked() -> None:
    stub_enums = {
        id(value)
        for stub_mod, _ in MODULE_PAIRS
        for _, value in _public(stub_mod)
        if isinstance(value, type) and issubclass(value, enum.Enum)
    }
    assert stub_enums == {id(_resolve(stub, path)) for path in ENUM_PATHS}


def _outcome(fn: Callable[[], object]) -> tuple[str, object]:
    """What a call did, comparable across the two libraries: ("ok", value) or ("raised", type)."""
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raised", type(exc))


@pytest.mark.parametrize("path", ENUM_PATHS)
def test_enum_members_values_and_order_match(path: str) -> None:
    stub_enum, real_enum = _resolve(stub, path), _resolve(real, path)
    assert [(m.name, m.value) for m in stub_enum] == [(m.name, m.value) for m in real_enum]
    assert list(stub_enum.__members__) == list(real_enum.__members__)


@pytest.mark.parametrize("path", ENUM_PATHS)
def test_enum_behaviour_matches(path: str) -> None:
    def probes(e: type[enum.Enum]) -> list[object]:
        members = list(e)
        first, last = members[0], members[-1]
        results: list[object] = [
            len(e),
            _outcome(lambda: e["no_such_member"]),
            _outcome(lambda: e[first.name.lower()]),
            _outcome(lambda: e(10_000)),
            _outcome(lambda: e(first.name)),
            _outcome(lambda: first < last),
        ]
        for m in e:
            results += [
                repr(m),
                str(m),
                f"{m}",
                e[m.name] is m,
                e.__members__[m.name] is m,
                e(m.value) is m,
                m == m.value,
                bool(m),
                {m: 1}.get(e[m.name]),
                pickle.loads(pickle.dumps(m)) is m,
                copy.deepcopy(m) is m,
                _outcome(lambda m=m: int(m)),
            ]
        return results

    assert probes(_resolve(stub, path)) == probes(_resolve(real, path))


# --- MeshShape -----------------------------------------------------------------------------


MESH_SHAPE_CASES: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((2, 4), {}),
    ((1, 8, 2), {}),
    (([1, 32],), {}),
    (((8,),), {}),
    ((range(2, 4),), {}),
    (([1, 2, 3, 4],), {}),
    (([2, 3, 0],), {}),
    ((), {"s0": 4, "s1": 8}),
    ((2,), {"s1": 4}),
    ((), {"s0": 1, "s1": 2, "s2": 3}),
    ((), {"shape": [2, 2]}),
    ((0, 4), {}),
    ((True, 4), {}),
    ((65536, 65536), {}),
    ((2**32 - 1, 1), {}),
    ((), {}),
    ((2,), {}),
    ((1, 2, 3, 4), {}),
    ((-1, 4), {}),
    ((2.0, 4), {}),
    (("2", 4), {}),
    ((2**32, 1), {}),
    ((None, 1), {}),
    (("ab",), {}),
    ((b"ab",), {}),
    ((iter([1, 8]),), {}),
    (({1: 2},), {}),
    (([1.0, 2],), {}),
    (([-1, 2],), {}),
    (([2, 4], 1), {}),
    (([],), {}),
    ((), {"s0": 1}),
    ((), {"rows": 1, "cols": 8}),
    # numpy is a dependency of the ttnn wheel
    ((np.array([1, 8]),), {}),
    ((np.int64(2), np.uint8(4)), {}),
    ((np.array([1.5, 2.0]),), {}),
]


def _mesh_shape_probes(
    lib: types.ModuleType, args: tuple[object, ...], kwargs: dict[str, object]
) -> list[object]:
    made = _outcome(lambda: lib.MeshShape(*args, **kwargs))
    if made[0] == "raised":
        return [made]
    shape = made[1]
    dims = list(shape)
    n = len(dims)
    same = lib.MeshShape(dims)
    other = lib.MeshShape([*dims, 1])
    return [
        repr(shape),
        str(shape),
        f"{shape}",
        shape.dims(),
        shape.mesh_size(),
        dims,
        [_outcome(lambda i=i: shape[i]) for i in range(-n - 2, n + 2)],
        [_outcome(lambda i=i: shape[i]) for i in (1.0, "0", slice(0, 1), True, None)],
        shape == same,
        shape != same,
        shape == other,
        shape != other,
        lib.MeshShape(shape) == shape,
        {shape: 1}.get(same),  # identity hash: equal shapes are different keys
        {shape: 1}.get(shape),
        dims[0] in shape,
        bool(shape),
        _outcome(lambda: shape == tuple(dims)),
        _outcome(lambda: shape != tuple(dims)),
        _outcome(lambda: shape == None),  # noqa: E711 - probing __eq__ itself
        _outcome(lambda: len(shape)),
        _outcome(lambda: shape < other),
        _outcome(lambda: pickle.dumps(shape)),
        _outcome(lambda: copy.copy(shape)),
        _outcome(lambda: copy.deepcopy(shape)),
        _outcome(lambda: setattr(shape, "rows", 1)),
    ]


@pytest.mark.parametrize(("args", "kwargs"), MESH_SHAPE_CASES, ids=repr)
def test_mesh_shape_behaviour_matches(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    assert _mesh_shape_probes(stub, args, kwargs) == _mesh_shape_probes(real, args, kwargs)


# --- calls that would reach a device ---------------------------------------------------------

# Each is called on both libraries with plausible arguments; both must raise the same type.
DEVICE_CALLS: dict[str, Callable[[types.ModuleType], object]] = {
    "open_mesh_device": lambda t: t.open_mesh_device(
        t.MeshShape(1, 8),
        l1_small_size=32768,
        trace_region_size=23887872,
        num_command_queues=1,
        worker_l1_size=1345000,
    ),
    "open_mesh_device()": lambda t: t.open_mesh_device(),
    "set_fabric_config": lambda t: t.set_fabric_config(t.FabricConfig.FABRIC_1D),
    "set_fabric_config(kwargs)": lambda t: t.set_fabric_config(
        config=t.FabricConfig.FABRIC_1D_RING,
        reliability_mode=t.FabricReliabilityMode.RELAXED_INIT,
        num_planes=2,
    ),
    "get_fabric_config": lambda t: t.get_fabric_config(),
    "get_device_ids": lambda t: t.get_device_ids(),
    "get_num_devices": lambda t: t.get_num_devices(),
    "GetNumAvailableDevices": lambda t: t.GetNumAvailableDevices(),
    "get_num_pcie_devices": lambda t: t.get_num_pcie_devices(),
    "GetNumPCIeDevices": lambda t: t.GetNumPCIeDevices(),
    "get_pcie_device_ids": lambda t: t.get_pcie_device_ids(),
    "get_max_worker_l1_unreserved_size": lambda t: t.get_max_worker_l1_unreserved_size(),
    "DispatchCoreConfig()": lambda t: t.DispatchCoreConfig(),
    "DispatchCoreConfig(WORKER, COL)": lambda t: t.DispatchCoreConfig(
        t.DispatchCoreType.WORKER, t.DispatchCoreAxis.COL
    ),
    "DispatchCoreConfig(ETH)": lambda t: t.DispatchCoreConfig(type=t.DispatchCoreType.ETH),
    "cluster.get_cluster_type": lambda t: t.cluster.get_cluster_type(),
    "device.GetNumAvailableDevices": lambda t: t.device.GetNumAvailableDevices(),
}
# No MeshDevice can exist without chips, so these get what a caller could hold instead.
HANDLE_CALLS: dict[str, Callable[[types.ModuleType], object]] = {
    "close_mesh_device(None)": lambda t: t.close_mesh_device(None),
    "close_mesh_device(object)": lambda t: t.close_mesh_device(object()),
    "synchronize_device": lambda t: t.synchronize_device(None),
    "synchronize_device(cq_id)": lambda t: t.device.synchronize_device(object(), cq_id=0),
    "ReadDeviceProfiler": lambda t: t.ReadDeviceProfiler(None),
    "MeshDevice()": lambda t: t.MeshDevice(),
    "MeshDevice(shape)": lambda t: t.MeshDevice(t.MeshShape(1, 1)),
}
# Wrong argument types: real ttnn rejects them before it looks for chips.
BAD_ARGUMENT_CALLS: dict[str, Callable[[types.ModuleType], object]] = {
    "set_fabric_config(str)": lambda t: t.set_fabric_config("FABRIC_1D"),
    "set_fabric_config(reliability str)": lambda t: t.set_fabric_config(
        t.FabricConfig.FABRIC_1D, "RELAXED_INIT"
    ),
    "set_fabric_config(num_planes str)": lambda t: t.set_fabric_config(
        t.FabricConfig.FABRIC_1D, num_planes="2"
    ),
    "set_fabric_config(unknown kw)": lambda t: t.set_fabric_config(
        t.FabricConfig.FABRIC_1D, topology=1
    ),
    "set_fabric_config()": lambda t: t.set_fabric_config(),
    "DispatchCoreConfig(str)": lambda t: t.DispatchCoreConfig("WORKER"),
    "DispatchCoreConfig(axis str)": lambda t: t.DispatchCoreConfig(axis="col"),
    "DispatchCoreConfig(unknown kw)": lambda t: t.DispatchCoreConfig(bogus=1),
    "open_mesh_device(unknown kw)": lambda t: t.open_mesh_device(t.MeshShape(1, 1), l1_size=1),
    "get_cluster_type(arg)": lambda t: t.cluster.get_cluster_type(1),
    "get_num_devices(arg)": lambda t: t.get_num_devices(1),
}


def _raised(lib: types.ModuleType, call: Callable[[types.ModuleType], object]) -> Exception:
    try:
        result = call(lib)
    except Exception as exc:
        return exc
    pytest.fail(f"{lib.__name__} returned {result!r} instead of raising")


@pytest.mark.parametrize("call", DEVICE_CALLS.values(), ids=DEVICE_CALLS.keys())
def test_device_calls_raise_runtime_error_in_both(
    call: Callable[[types.ModuleType], object],
) -> None:
    real_exc, stub_exc = _raised(real, call), _raised(stub, call)
    assert type(real_exc) is RuntimeError, real_exc
    assert type(stub_exc) is RuntimeError
    assert "No chips detected" in str(real_exc)
    assert "No chips detected" in str(stub_exc)


@pytest.mark.parametrize(
    "call",
    [*HANDLE_CALLS.values(), *BAD_ARGUMENT_CALLS.values()],
    ids=[*HANDLE_CALLS.keys(), *BAD_ARGUMENT_CALLS.keys()],
)
def test_handle_and_bad_argument_calls_raise_type_error_in_both(
    call: Callable[[types.ModuleType], object],
) -> None:
    assert type(_raised(real, call)) is TypeError
    assert type(_raised(stub, call)) is TypeError


def test_every_stub_function_is_exercised() -> None:
    called = {key.split("(")[0].rsplit(".", 1)[-1] for key in [*DEVICE_CALLS, *HANDLE_CALLS]}
    for name, _, _ in FUNCTIONS:
        assert name.rsplit(".", 1)[-1] in called, f"{name} is not called by the parity test"


@pytest.mark.parametrize(
    ("path", "chipless_answer"),
    [
        ("get_arch_name", "invalid"),
        ("device.is_wormhole_b0", False),
        ("device.is_blackhole", False),
    ],
)
def test_arch_queries_answer_without_chips_so_the_stub_omits_them(
    path: str, chipless_answer: object
) -> None:
    # If real ttnn starts raising here, the stub can take these names on.
    real_fn: object = real
    for part in path.split("."):
        real_fn = getattr(real_fn, part)
    assert callable(real_fn) and real_fn() == chipless_answer
    stub_mod = stub.device if path.startswith("device.") else stub
    assert not hasattr(stub_mod, path.rsplit(".", 1)[-1])
