"""The real (non-emulated) mesh open/close path of device/mesh.py, against a recording fake
``ttnn``.

The fake sits at the device boundary only: it reuses the host stub's enums and MeshShape (real
ttnn's names and values), binds every call against the stub's signature (so a keyword real ttnn
does not take fails here too), type-checks enum arguments as real ttnn does, and records each
call in order instead of raising. Options come from ``parse_tt_options`` or a real VllmConfig.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import ttnn as stub_ttnn

from vllm_tt_plugin.config import TTOptions, parse_tt_options
from vllm_tt_plugin.device.mesh import OpenedMesh, close_mesh, open_mesh, startup_reason
from vllm_tt_plugin.device.mesh_open import MeshOpenError
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.mesh_spec import mesh_spec_from_env

FabricConfig = stub_ttnn.FabricConfig
FabricReliabilityMode = stub_ttnn.FabricReliabilityMode
DispatchCoreAxis = stub_ttnn.DispatchCoreAxis
ClusterType = stub_ttnn.cluster.ClusterType

# Parameters real ttnn's open_mesh_device takes that map to TT options.
MEMORY_OPTIONS = ("l1_small_size", "worker_l1_size", "trace_region_size")


@dataclass
class Call:
    name: str
    args: dict[str, Any]


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments as passed, bound to the stub's (real ttnn's) signature."""
    return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)


def _require(name: str, value: Any, expected: type) -> None:
    if not isinstance(value, expected):
        raise TypeError(f"{name}: expected {expected.__name__}, got {value!r}")


class FakeMeshDevice:
    def __init__(self, shape: tuple[int, ...], fabric: Any) -> None:
        self.shape = shape
        self.fabric_at_open = fabric
        self.closed = False


class FakeDispatchCoreConfig:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = _bind(stub_ttnn.DispatchCoreConfig, args, kwargs)
        if bound.get("axis") is not None:
            _require("DispatchCoreConfig.axis", bound["axis"], DispatchCoreAxis)
        if bound.get("type") is not None:
            _require("DispatchCoreConfig.type", bound["type"], stub_ttnn.DispatchCoreType)
        self.args = bound


@dataclass
class FakeTTNN:
    """Recorder behind the fake module: the cluster it reports and every call made."""

    cluster_type: Any = ClusterType.N150
    # The cluster description: how many chips ttnn counts, or the error it raises probing them.
    chips: int = 32
    probe_error: Exception | None = None
    calls: list[Call] = field(default_factory=list)
    fabric: Any = FabricConfig.DISABLED

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def only(self, name: str) -> Call:
        found = [c for c in self.calls if c.name == name]
        assert len(found) == 1, f"expected one {name} call, got {self.names()}"
        return found[0]

    # --- the ttnn API device/mesh.py may call --------------------------------------------------
    def get_cluster_type(self) -> Any:
        self.calls.append(Call("cluster.get_cluster_type", {}))
        if self.probe_error is not None:
            raise self.probe_error
        return self.cluster_type

    def get_num_available_devices(self) -> int:
        self.calls.append(Call("GetNumAvailableDevices", {}))
        if self.probe_error is not None:
            raise self.probe_error
        return self.chips

    def set_fabric_config(self, *args: Any, **kwargs: Any) -> None:
        bound = _bind(stub_ttnn.set_fabric_config, args, kwargs)
        _require("set_fabric_config.config", bound["config"], FabricConfig)
        if "reliability_mode" in bound:
            mode = bound["reliability_mode"]
            _require("set_fabric_config.reliability_mode", mode, FabricReliabilityMode)
        self.calls.append(Call("set_fabric_config", bound))
        self.fabric = bound["config"]

    def dispatch_core_config(self, *args: Any, **kwargs: Any) -> FakeDispatchCoreConfig:
        config = FakeDispatchCoreConfig(*args, **kwargs)
        self.calls.append(Call("DispatchCoreConfig", config.args))
        return config

    def open_mesh_device(self, *args: Any, **kwargs: Any) -> FakeMeshDevice:
        bound = _bind(stub_ttnn.open_mesh_device, args, kwargs)
        _require("open_mesh_device.mesh_shape", bound["mesh_shape"], stub_ttnn.MeshShape)
        if "dispatch_core_config" in bound:
            dispatch = bound["dispatch_core_config"]
            _require("open_mesh_device.dispatch_core_config", dispatch, FakeDispatchCoreConfig)
        self.calls.append(Call("open_mesh_device", bound))
        return FakeMeshDevice(tuple(bound["mesh_shape"]), self.fabric)

    def close_mesh_device(self, *args: Any, **kwargs: Any) -> None:
        bound = _bind(stub_ttnn.close_mesh_device, args, kwargs)
        _require("close_mesh_device.mesh_device", bound["mesh_device"], FakeMeshDevice)
        bound["mesh_device"].closed = True
        self.calls.append(Call("close_mesh_device", bound))

    def module(self) -> types.ModuleType:
        cluster = types.ModuleType("ttnn.cluster")
        cluster.ClusterType = ClusterType  # type: ignore[attr-defined]
        cluster.get_cluster_type = self.get_cluster_type  # type: ignore[attr-defined]
        mod = types.ModuleType("ttnn")
        # An installed module has a spec; vLLM's plugin loader looks ttnn up with find_spec.
        mod.__spec__ = importlib.machinery.ModuleSpec("ttnn", loader=None)
        attrs: dict[str, Any] = {
            "FabricConfig": FabricConfig,
            "FabricReliabilityMode": FabricReliabilityMode,
            "DispatchCoreAxis": DispatchCoreAxis,
            "DispatchCoreType": stub_ttnn.DispatchCoreType,
            "MeshShape": stub_ttnn.MeshShape,
            "DispatchCoreConfig": self.dispatch_core_config,
            "GetNumAvailableDevices": self.get_num_available_devices,
            "set_fabric_config": self.set_fabric_config,
            "open_mesh_device": self.open_mesh_device,
            "close_mesh_device": self.close_mesh_device,
            "cluster": cluster,
        }
        for name, value in attrs.items():
            setattr(mod, name, value)
        return mod


@pytest.fixture
def fake_ttnn(monkeypatch: pytest.MonkeyPatch) -> FakeTTNN:
    fake = FakeTTNN()
    monkeypatch.setitem(sys.modules, "ttnn", fake.module())
    monkeypatch.delenv("TT_VISIBLE_DEVICES", raising=False)
    return fake


def open_from_env(
    monkeypatch: pytest.MonkeyPatch,
    mesh_device: str,
    tt: dict[str, Any] | None = None,
    capabilities: ModelCapabilities | None = None,
    device_ids: list[int] | None = None,
) -> OpenedMesh:
    monkeypatch.setenv("MESH_DEVICE", mesh_device)
    return open_mesh(
        mesh_spec_from_env(),
        parse_tt_options(tt or {}),
        capabilities or ModelCapabilities(),
        device_ids,
    )


# --- fabric: hardware defaults, order, single device -------------------------------------------


@pytest.mark.parametrize(
    ("mesh_device", "cluster", "shape", "fabric"),
    [
        ("N300", ClusterType.N300, (1, 2), FabricConfig.FABRIC_1D),
        ("T3K", ClusterType.T3K, (1, 8), FabricConfig.FABRIC_1D),
        ("P150x4", ClusterType.P150_X4, (1, 4), FabricConfig.FABRIC_1D),
        ("(2,4)", ClusterType.T3K, (2, 4), FabricConfig.FABRIC_1D),
        ("TG", ClusterType.TG, (8, 4), FabricConfig.FABRIC_1D_RING),
        ("TG", ClusterType.GALAXY, (8, 4), FabricConfig.FABRIC_1D_RING),
        # GPT-OSS recipe: a "(r,c)" shape on a Wormhole Galaxy still gets the Galaxy default.
        ("(4,8)", ClusterType.GALAXY, (4, 8), FabricConfig.FABRIC_1D_RING),
        ("BH-Galaxy", ClusterType.BLACKHOLE_GALAXY, (8, 4), FabricConfig.FABRIC_2D_TORUS_XY),
        # Qwen3-32B recipe: MESH_DEVICE=TG on a Blackhole Galaxy; the cluster type decides.
        ("TG", ClusterType.BLACKHOLE_GALAXY, (8, 4), FabricConfig.FABRIC_2D_TORUS_XY),
    ],
)
def test_multi_device_sets_fabric_before_opening(
    fake_ttnn: FakeTTNN,
    monkeypatch: pytest.MonkeyPatch,
    mesh_device: str,
    cluster: Any,
    shape: tuple[int, int],
    fabric: Any,
) -> None:
    fake_ttnn.cluster_type = cluster
    opened = open_from_env(monkeypatch, mesh_device)

    names = fake_ttnn.names()
    assert names.index("cluster.get_cluster_type") < names.index("set_fabric_config")
    assert names.index("set_fabric_config") < names.index("open_mesh_device")
    assert fake_ttnn.only("set_fabric_config").args == {"config": fabric}
    assert tuple(fake_ttnn.only("open_mesh_device").args["mesh_shape"]) == shape

    device = opened.device
    assert isinstance(device, FakeMeshDevice)
    assert device.fabric_at_open is fabric
    assert device.shape == shape
    assert not opened.emulated
    assert opened.fabric_applied
    assert opened.fabric_kwargs == {"config": fabric}
    assert opened.spec.shape == shape


@pytest.mark.parametrize(
    ("mesh_device", "cluster"),
    [("N150", ClusterType.N150), ("(1,1)", ClusterType.N150), ("P150", ClusterType.P150)],
)
def test_single_device_never_sets_fabric(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch, mesh_device: str, cluster: Any
) -> None:
    fake_ttnn.cluster_type = cluster
    # Neither a model dictionary nor launch overrides make a single device initialise fabric.
    opened = open_from_env(
        monkeypatch,
        mesh_device,
        tt={"fabric_config": "FABRIC_2D", "fabric_reliability_mode": "RELAXED_INIT"},
        capabilities=ModelCapabilities(fabric_config={"num_planes": 2}),
    )
    assert "set_fabric_config" not in fake_ttnn.names()
    assert tuple(fake_ttnn.only("open_mesh_device").args["mesh_shape"]) == (1, 1)
    assert opened.fabric_kwargs is None
    assert not opened.fabric_applied

    close_mesh(opened)
    assert fake_ttnn.names()[-1] == "close_mesh_device"
    assert "set_fabric_config" not in fake_ttnn.names()


def test_mesh_device_defaults_to_n150(fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MESH_DEVICE", raising=False)
    open_mesh(mesh_spec_from_env(), parse_tt_options({}), ModelCapabilities())
    assert tuple(fake_ttnn.only("open_mesh_device").args["mesh_shape"]) == (1, 1)
    assert "set_fabric_config" not in fake_ttnn.names()


# --- fabric: model dictionary and launch overrides --------------------------------------------


def test_reliability_mode_reaches_set_fabric_config(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.T3K
    open_from_env(monkeypatch, "T3K", tt={"fabric_reliability_mode": "RELAXED_INIT"})
    assert fake_ttnn.only("set_fabric_config").args == {
        "config": FabricConfig.FABRIC_1D,
        "reliability_mode": FabricReliabilityMode.RELAXED_INIT,
    }


def test_model_dictionary_is_forwarded_over_hardware_default(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.GALAXY
    model_fabric: dict[str, Any] = {"config": FabricConfig.FABRIC_2D, "num_planes": 2}
    opened = open_from_env(
        monkeypatch, "TG", capabilities=ModelCapabilities(fabric_config=model_fabric)
    )
    assert fake_ttnn.only("set_fabric_config").args == {
        "config": FabricConfig.FABRIC_2D,
        "num_planes": 2,
    }
    assert model_fabric == {"config": FabricConfig.FABRIC_2D, "num_planes": 2}
    assert opened.fabric_kwargs is not model_fabric


def test_model_dictionary_without_config_keeps_cluster_default(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.BLACKHOLE_GALAXY
    open_from_env(
        monkeypatch, "TG", capabilities=ModelCapabilities(fabric_config={"num_planes": 2})
    )
    assert fake_ttnn.only("set_fabric_config").args == {
        "config": FabricConfig.FABRIC_2D_TORUS_XY,
        "num_planes": 2,
    }


def test_launch_overrides_win_over_model_dictionary(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.GALAXY
    model_fabric: dict[str, Any] = {
        "config": FabricConfig.FABRIC_2D,
        "reliability_mode": FabricReliabilityMode.STRICT_INIT,
        "num_planes": 2,
    }
    snapshot = dict(model_fabric)
    open_from_env(
        monkeypatch,
        "TG",
        tt={"fabric_config": "FABRIC_1D", "fabric_reliability_mode": "RELAXED_INIT"},
        capabilities=ModelCapabilities(fabric_config=model_fabric),
    )
    assert fake_ttnn.only("set_fabric_config").args == {
        "config": FabricConfig.FABRIC_1D,
        "reliability_mode": FabricReliabilityMode.RELAXED_INIT,
        "num_planes": 2,
    }
    assert model_fabric == snapshot


def test_bad_fabric_override_fails_before_touching_the_device(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.T3K
    monkeypatch.setenv("MESH_DEVICE", "T3K")
    options = TTOptions(fabric_config="FABRIC_9D")  # as if it bypassed option parsing
    with pytest.raises(ValueError, match="'fabric_config' has invalid value 'FABRIC_9D'"):
        open_mesh(mesh_spec_from_env(), options, ModelCapabilities())
    assert "set_fabric_config" not in fake_ttnn.names()
    assert "open_mesh_device" not in fake_ttnn.names()


# --- dispatch core config and memory options ----------------------------------------------------


@pytest.mark.parametrize(
    ("axis_option", "expected"),
    [
        (None, {}),
        ("row", {"axis": DispatchCoreAxis.ROW}),
        ("col", {"axis": DispatchCoreAxis.COL}),
        ("COL", {"axis": DispatchCoreAxis.COL}),
    ],
)
def test_dispatch_core_axis_option(
    fake_ttnn: FakeTTNN,
    monkeypatch: pytest.MonkeyPatch,
    axis_option: str | None,
    expected: dict[str, Any],
) -> None:
    tt = {} if axis_option is None else {"dispatch_core_axis": axis_option}
    open_from_env(monkeypatch, "N150", tt=tt)
    assert fake_ttnn.only("DispatchCoreConfig").args == expected
    passed = fake_ttnn.only("open_mesh_device").args["dispatch_core_config"]
    assert isinstance(passed, FakeDispatchCoreConfig)
    assert passed.args == expected
    names = fake_ttnn.names()
    assert names.index("DispatchCoreConfig") < names.index("open_mesh_device")


def test_memory_options_reach_open_mesh_device(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.GALAXY
    tt = {"l1_small_size": 768, "worker_l1_size": 1344544, "trace_region_size": 216580672}
    open_from_env(monkeypatch, "TG", tt=tt)
    args = fake_ttnn.only("open_mesh_device").args
    assert {k: args[k] for k in MEMORY_OPTIONS} == tt


def test_zero_memory_option_is_forwarded(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_from_env(monkeypatch, "N150", tt={"worker_l1_size": 0})
    assert fake_ttnn.only("open_mesh_device").args["worker_l1_size"] == 0


def test_unset_memory_options_leave_ttnn_defaults(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spec gives these options no plugin default: ttnn's own open-time defaults apply.
    open_from_env(monkeypatch, "N300")
    args = fake_ttnn.only("open_mesh_device").args
    assert not set(MEMORY_OPTIONS) & set(args)
    assert set(args) == {"mesh_shape", "dispatch_core_config"}
    defaults = inspect.signature(stub_ttnn.open_mesh_device).bind(**args)
    defaults.apply_defaults()
    assert defaults.arguments["l1_small_size"] == stub_ttnn.device.DEFAULT_L1_SMALL_SIZE
    assert defaults.arguments["trace_region_size"] == stub_ttnn.device.DEFAULT_TRACE_REGION_SIZE


def test_physical_device_ids_are_forwarded(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_from_env(monkeypatch, "(1,2)", device_ids=[4, 5])
    args = fake_ttnn.only("open_mesh_device").args
    assert args["physical_device_ids"] == [4, 5]
    assert tuple(args["mesh_shape"]) == (1, 2)


# --- closing ----------------------------------------------------------------------------------


def test_close_closes_mesh_then_resets_fabric(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.T3K
    opened = open_from_env(monkeypatch, "T3K")
    fake_ttnn.calls.clear()
    close_mesh(opened)
    assert fake_ttnn.names() == ["close_mesh_device", "set_fabric_config"]
    assert fake_ttnn.calls[0].args["mesh_device"] is opened.device
    assert fake_ttnn.calls[1].args == {"config": FabricConfig.DISABLED}
    assert isinstance(opened.device, FakeMeshDevice) and opened.device.closed
    assert fake_ttnn.fabric is FabricConfig.DISABLED


def test_failed_open_resets_the_fabric_it_set(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.T3K

    def refuse(*args: Any, **kwargs: Any) -> FakeMeshDevice:
        fake_ttnn.calls.append(Call("open_mesh_device", kwargs))
        raise RuntimeError("No chips detected")

    monkeypatch.setattr(sys.modules["ttnn"], "open_mesh_device", refuse)
    with pytest.raises(RuntimeError, match="No chips detected"):
        open_from_env(monkeypatch, "T3K")
    assert fake_ttnn.names()[-2:] == ["open_mesh_device", "set_fabric_config"]
    assert fake_ttnn.fabric is FabricConfig.DISABLED


def test_emulated_mesh_never_calls_the_device_api(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.T3K
    opened = open_from_env(
        monkeypatch, "T3K", tt={"emulated_mesh": True, "fabric_reliability_mode": "RELAXED_INIT"}
    )
    try:
        assert opened.emulated
        assert not opened.fabric_applied
        assert opened.fabric_kwargs == {
            "config": FabricConfig.FABRIC_1D,
            "reliability_mode": FabricReliabilityMode.RELAXED_INIT,
        }
    finally:
        close_mesh(opened)
    assert fake_ttnn.calls == []


# --- through the worker, from a real VllmConfig ----------------------------------------------


def test_worker_opens_and_closes_the_mesh_from_launch_options(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch, make_config: Callable[..., Any]
) -> None:
    from vllm_tt_plugin.worker import TTWorker

    tt = {
        "dispatch_core_axis": "col",
        "worker_l1_size": 1344544,
        "trace_region_size": 216580672,
        "fabric_reliability_mode": "RELAXED_INIT",
    }
    config = make_config(tt=tt, model_class="tests.unit.fakes.models:FabricModel")
    monkeypatch.setenv("MESH_DEVICE", "TG")
    fake_ttnn.cluster_type = ClusterType.GALAXY
    worker = TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")
    worker.init_device()
    assert fake_ttnn.names() == [
        "cluster.get_cluster_type",
        "GetNumAvailableDevices",
        "set_fabric_config",
        "DispatchCoreConfig",
        "open_mesh_device",
    ]
    assert fake_ttnn.only("set_fabric_config").args == {
        "config": FabricConfig.FABRIC_1D_RING,
        "num_planes": 2,  # FabricModel's dictionary
        "reliability_mode": FabricReliabilityMode.RELAXED_INIT,
    }
    assert fake_ttnn.only("DispatchCoreConfig").args == {"axis": DispatchCoreAxis.COL}
    args = fake_ttnn.only("open_mesh_device").args
    assert tuple(args["mesh_shape"]) == (8, 4)
    assert args["worker_l1_size"] == 1344544
    assert args["trace_region_size"] == 216580672
    assert "l1_small_size" not in args
    assert "physical_device_ids" not in args
    # The model's TTNN objects stay out of vLLM's serialisable config.
    assert "num_planes" not in repr(config.additional_config)

    device = worker.mesh.device if worker.mesh is not None else None
    worker.shutdown()
    assert worker.mesh is None
    assert fake_ttnn.names()[-2:] == ["close_mesh_device", "set_fabric_config"]
    assert fake_ttnn.calls[-2].args["mesh_device"] is device
    assert fake_ttnn.calls[-1].args == {"config": FabricConfig.DISABLED}


# --- a mesh that cannot open: one line naming the request, what ttnn found, the remedies ------

# Real ttnn 0.81.1's text on a host with no chips (backtrace cut short).
REAL_NO_CHIPS = (
    "TT_FATAL @ /project/tt_metal/llrt/tt_cluster.cpp:129: num_chips > 0\ninfo:\n"
    "No chips detected in the cluster\nbacktrace:\n --- tt::Cluster::generate_cluster_descriptor()"
    "\n --- tt::tt_metal::GetClusterType()\n"
)
REMEDIES = ("TT driver is loaded", "`tt-smi`", '"emulated_mesh": true', "docs/EMULATED_MESH.md")


def _refusal(monkeypatch: pytest.MonkeyPatch, mesh_device: str, **kwargs: Any) -> str:
    with pytest.raises(MeshOpenError) as raised:
        open_from_env(monkeypatch, mesh_device, **kwargs)
    line = str(raised.value)
    assert "\n" not in line and " --- " not in line, line
    assert raised.value.__cause__ is None
    return line


def test_a_host_without_chips_gets_one_line(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.probe_error = RuntimeError(REAL_NO_CHIPS)
    line = _refusal(monkeypatch, "T3K")
    assert line.startswith(
        "TT: cannot open the mesh: MESH_DEVICE=T3K asks for a 1x8 mesh (8 chips)"
    )
    assert "but ttnn found no chips (ttnn: No chips detected in the cluster)" in line
    assert "if another process holds the device, stop it" in line
    for remedy in REMEDIES:
        assert remedy in line
    assert fake_ttnn.names() == ["cluster.get_cluster_type"]


def test_a_shape_larger_than_the_chips_found_gets_one_line(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type, fake_ttnn.chips = ClusterType.N300, 2
    line = _refusal(monkeypatch, "T3K")
    assert line.startswith(
        "TT: cannot open the mesh: MESH_DEVICE=T3K asks for a 1x8 mesh (8 chips)"
    )
    assert "but ttnn found 2 chips (N300)" in line
    assert 'set MESH_DEVICE to a system or "(rows,cols)" shape of at most 2 chips' in line
    for remedy in REMEDIES:
        assert remedy in line
    # Refused before fabric or the mesh is touched.
    assert fake_ttnn.names() == ["cluster.get_cluster_type", "GetNumAvailableDevices"]


def test_device_ids_beyond_the_chips_found_are_refused(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type, fake_ttnn.chips = ClusterType.N300, 2
    line = _refusal(monkeypatch, "(1,2)", device_ids=[2, 3])
    assert "asks for a 1x2 mesh (2 chips) on devices [2, 3], but ttnn found 2 chips" in line
    assert "open_mesh_device" not in fake_ttnn.names()


def test_a_busy_device_gets_one_line_and_fabric_is_reset(
    fake_ttnn: FakeTTNN, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ttnn.cluster_type = ClusterType.N300

    def busy(*args: Any, **kwargs: Any) -> FakeMeshDevice:
        raise RuntimeError("TT_FATAL @ x.cpp:1: ok\ninfo:\nDevice 0 is in use by another process")

    monkeypatch.setattr(sys.modules["ttnn"], "open_mesh_device", busy)
    line = _refusal(monkeypatch, "N300")
    assert "but the device is busy (ttnn: Device 0 is in use by another process)" in line
    assert "another process holds the device: stop it" in line
    assert fake_ttnn.fabric is FabricConfig.DISABLED


def test_the_host_stub_gets_the_same_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # No fake: the import-only stub raises as real ttnn does on a chipless host.
    monkeypatch.setitem(sys.modules, "ttnn", stub_ttnn)
    monkeypatch.delenv("TT_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("MESH_DEVICE", raising=False)
    line = _refusal(monkeypatch, "N150")
    assert "MESH_DEVICE=N150 asks for a 1x1 mesh (1 chip), but ttnn found no chips" in line
    monkeypatch.delenv("MESH_DEVICE")
    with pytest.raises(MeshOpenError, match=r"MESH_DEVICE=N150 \(default\) asks for a 1x1 mesh"):
        open_mesh(mesh_spec_from_env(), parse_tt_options({}), ModelCapabilities())


def test_the_reason_reaches_the_process_that_started_this_one() -> None:
    # A child records its reason; this process (its parent, as the API server is the engine
    # core's) collects it once, and the file is gone.
    code = "from vllm_tt_plugin.device import startup_reason; startup_reason.record('TT: reason')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert startup_reason.collect() == ["TT: reason"]
    assert startup_reason.collect() == []
