"""The plugin's Prometheus metrics: what the TT path did, on the server's ``/metrics``.

vLLM serves ``/metrics`` from the API-server process, but the runner, scheduler and worker run
in the engine-core process (one per standard-DP rank). The engine side therefore writes its
samples into prometheus_client's multiprocess files (one mmap file per process, the format
``prometheus_client.multiprocess`` reads), and the API server reads them at scrape time:

- ``vllm serve`` with one API server: :func:`install_collector` (run by the general plugin in
  every process, before any engine process starts) creates ``TT_VLLM_METRICS_DIR``, which the
  engine processes inherit, and registers a ``MultiProcessCollector`` for it in vLLM's registry
  (prometheus_client's global ``REGISTRY``, which vLLM's ``/metrics`` serves);
- vLLM's own multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by vLLM for
  ``--api-server-count > 1``, the default with ``--data-parallel-size > 1``): the files go into
  that directory, which vLLM's collector already reads.

An increment is a dict update, one per step and counter, never per row; the 8-byte writes into
the mmap happen in :func:`flush`, off the step path: every ``host_phases.FLUSH_INTERVAL_S`` on
the host-phase publisher's thread, when a step finishes a request (the scheduler, before the
client sees the request's last output) and at exit. Writing per step measured 7-38 us per
decode step in the engine (docs/BENCHMARKS.md). A new series (``touch``) and the info gauge are
written at once. ``TT_VLLM_METRICS=0`` turns the metrics off (nothing is written or collected).
Every metric is documented in docs/METRICS.md.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.observability.situations import Situation
from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from prometheus_client.mmap_dict import MmapedDict
    from vllm.v1.core.sched.output import SchedulerOutput

    from vllm_tt_plugin.config import TTOptions
    from vllm_tt_plugin.contract.reload_contract import ReloadCommand
    from vllm_tt_plugin.launch.mesh_spec import MeshSpec
    from vllm_tt_plugin.policy.sampling_route import RouteDecision

logger = get_logger(__name__)

ENV_METRICS = envs.TT_VLLM_METRICS.name  # "0" / "false" / "off" turns the plugin's metrics off
ENV_METRICS_DIR = envs.TT_VLLM_METRICS_DIR.name  # set by the plugin; engine processes inherit it
PROM_MULTIPROC_ENV = envs.PROMETHEUS_MULTIPROC_DIR.name
UNKNOWN = "unknown"
INFO_NAME = "tt_plugin_info"
INFO_HELP = "vllm-tt-plugin build and launch (docs/METRICS.md)"
INFO_LABELS = (
    "plugin_version",
    "plugin_commit",
    "vllm_version",
    "ttnn_version",
    "tt_metal_commit",
    "mesh_device",
    "mesh_shape",
    "model_class",
    "lanes",
    "max_num_seqs",
    "max_model_len",
    "tt_options",
    "weights",
    "async_scheduling",
    "chunked_prefill",
    "prefix_caching",
    "vllm_commit",
    "tensor_parallel",
    "data_parallel",
)


def metrics_enabled(env: Mapping[str, str] | None = None) -> bool:
    return envs.TT_VLLM_METRICS.get(env)


# --------------------------------------------------------------------------- process store


class _Store:
    """This process's multiprocess files: counters sum across processes, the info gauge takes
    the max (every rank publishes the same info, so it appears once)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self._files: dict[str, MmapedDict] = {}
        self._values: dict[tuple[str, str], float] = {}
        self._dirty: set[tuple[str, str]] = set()  # added to since the last flush
        self._lock = threading.Lock()

    def _file(self, prefix: str) -> MmapedDict:
        mm = self._files.get(prefix)
        if mm is None:
            from prometheus_client.mmap_dict import MmapedDict

            # "tt-<pid>" keeps these files apart from prometheus_client's own "<pid>" files
            # when they share vLLM's PROMETHEUS_MULTIPROC_DIR.
            path = os.path.join(self.directory, f"{prefix}_tt-{self.pid}.db")
            mm = self._files[prefix] = MmapedDict(path)
        return mm

    def add(self, prefix: str, key: str, amount: float) -> None:
        self.add_many(prefix, (key,), amount)

    def add_many(self, prefix: str, keys: Sequence[str], amount: float = 1.0) -> None:
        """Add ``amount`` to each key under one lock (a decode step's counters together); the
        file sees it at the next :meth:`flush`. ``amount`` 0 creates the series in the file now
        (a scrape then shows it at zero from the start)."""
        with self._lock:
            values = self._values
            if not amount:
                mm = self._file(prefix)
                for key in keys:
                    value = values.setdefault((prefix, key), 0.0)
                    mm.write_value(key, value, 0.0)
                return
            dirty = self._dirty
            for key in keys:
                values[(prefix, key)] = values.get((prefix, key), 0.0) + amount
                dirty.add((prefix, key))

    def flush(self) -> None:
        """Write every series added to since the last flush into the file."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for prefix, key in dirty:
                self._file(prefix).write_value(key, self._values[(prefix, key)], 0.0)

    def set(self, prefix: str, key: str, value: float) -> None:
        with self._lock:
            self._values[(prefix, key)] = value
            self._file(prefix).write_value(key, value, 0.0)


_store_cache: _Store | None = None


def _store() -> _Store | None:
    global _store_cache
    store = _store_cache
    if store is not None and store.pid == os.getpid():
        return store
    if not metrics_enabled():
        return None
    directory = metrics_directory()
    if not directory or not os.path.isdir(directory):
        return None
    _store_cache = _Store(directory)
    return _store_cache


def flush() -> None:
    """Write this process's pending increments into its metrics file (see the module doc). A
    forked child's copy of its parent's store is not its own: only the owner writes it."""
    store = _store_cache
    if store is not None and store.pid == os.getpid():
        store.flush()


atexit.register(flush)  # once per process; a store created later is flushed at exit too


def metrics_directory(env: Mapping[str, str] | None = None) -> str | None:
    """Where this process writes. vLLM's PROMETHEUS_MULTIPROC_DIR wins whenever it is set:
    vLLM sets it for several API servers (``--api-server-count > 1``, the default for
    ``--data-parallel-size > 1``) after the plugin may already have made its own directory, and
    then serves only what is in it."""
    return envs.PROMETHEUS_MULTIPROC_DIR.get(env) or envs.TT_VLLM_METRICS_DIR.get(env)


_collector_installed = False


def install_collector() -> None:
    """Make this process's ``/metrics`` (if it serves one) show the engine processes' samples.

    Idempotent; runs in every vLLM process (general plugin). Engine processes inherit the
    directory the first process created; their own collector is never scraped."""
    global _collector_installed
    if not metrics_enabled():
        return
    if envs.PROMETHEUS_MULTIPROC_DIR.get():
        return  # vLLM's multiprocess mode: its registry reads that directory already
    directory = envs.TT_VLLM_METRICS_DIR.get()
    if not directory:
        try:
            directory = tempfile.mkdtemp(prefix="tt-vllm-metrics-")
        except OSError as exc:  # metrics must never take the server down
            logger.warning("TT plugin metrics are off: cannot create their directory: %s", exc)
            return
        envs.TT_VLLM_METRICS_DIR.export(directory)
        atexit.register(shutil.rmtree, directory, True)
    if _collector_installed or not os.path.isdir(directory):
        return
    from prometheus_client import REGISTRY
    from prometheus_client.multiprocess import MultiProcessCollector

    MultiProcessCollector(REGISTRY, path=directory)
    _collector_installed = True


# (counter name, label values) -> mmap key: built once per series, not per increment.
_counter_keys: dict[tuple[str, tuple[str, ...]], str] = {}


def _key(name: str, sample: str, labelnames: tuple[str, ...], labelvalues: tuple[str, ...],
         help_text: str) -> str:  # fmt: skip
    from prometheus_client.mmap_dict import mmap_key

    return mmap_key(name, sample, list(labelnames), list(labelvalues), help_text)


@dataclass(frozen=True)
class Counter:
    """A Prometheus counter ``<name>_total`` written to this process's multiprocess file."""

    name: str
    help: str
    labelnames: tuple[str, ...] = ()

    def inc(self, *labelvalues: str, amount: float = 1.0) -> None:
        if amount:
            self._add(labelvalues, amount)

    def touch(self, *labelvalues: str) -> None:
        """Create the series at zero (a scrape then shows it before the first increment)."""
        self._add(labelvalues, 0.0)

    def key(self, *labelvalues: str) -> str:
        """The series' key in the multiprocess file (built once per label values)."""
        key = _counter_keys.get((self.name, labelvalues))
        if key is None:
            if len(labelvalues) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {self.labelnames}, got {labelvalues}")
            key = _key(self.name, f"{self.name}_total", self.labelnames, labelvalues, self.help)
            _counter_keys[(self.name, labelvalues)] = key
        return key

    def _add(self, labelvalues: tuple[str, ...], amount: float) -> None:
        store = _store()
        if store is not None:
            store.add("counter", self.key(*labelvalues), amount)


# --------------------------------------------------------------------------- the counters

STEPS = Counter(
    "tt_steps",
    "TT steps run, by kind (prefill, decode) and sampling route (device, host; none: a prefill "
    "chunk that sampled no row)",
    ("kind", "route"),
)
HOST_FALLBACK = Counter(
    "tt_host_fallback_steps",
    "Steps sampled by vLLM's host sampler, by kind and the reason the batch left the device path",
    ("kind", "reason"),
)
DECODE_COMMANDS = Counter(
    "tt_decode_commands",
    "Decode reload commands sent (full_reload: reload_inputs; page_table_only; resident: "
    "nothing reloaded)",
    ("command",),
)
SAMPLING_RESETS = Counter(
    "tt_decode_sampling_resets", "Decode steps sent with reset_sampling_state (penalty history)"
)
SLOT_REMAPS = Counter("tt_slot_remaps", "Decode steps that moved slots (slot_remap sent)")
ASYNC_OVERLAPS = Counter(
    "tt_async_overlapped_decodes",
    "Decode steps submitted with read_from_device=False (read back while the next is scheduled)",
)
MULTI_ROW_PREFILLS = Counter(
    "tt_multi_row_prefills",
    "Prefill calls that sampled more than one row in one device call, by sampling route",
    ("route",),
)
PREFILL_CHUNKS = Counter(
    "tt_prefill_chunks",
    "Prefill rows that ended before their prompt's end (a chunk of a chunked prefill)",
)
LANE_STEPS = Counter("tt_lane_steps", "Steps in which the lane carried at least one row", ("lane",))
MULTI_LANE_STEPS = Counter("tt_multi_lane_steps", "Steps whose rows came from more than one lane")
PREEMPTED = Counter("tt_preempted_requests", "Requests preempted (their slot released)")
RESUMED = Counter("tt_preemptions_resumed", "Preempted requests resumed (recomputed by prefill)")
SITUATIONS = Counter(
    "tt_situations",
    "Rows (steps for the sampling ones) that put the model in a situation faults live in "
    "(observability/situations.py)",
    ("situation",),
)


# --------------------------------------------------------------------------- hook points
# One call per step at each decision point; each reads the decision object, never the rows.


def observe_schedule(so: SchedulerOutput) -> None:
    """Runner, on every scheduler output: preemptions and resumptions."""
    PREEMPTED.inc(amount=len(so.preempted_req_ids or ()))
    RESUMED.inc(amount=len(so.scheduled_cached_reqs.resumed_req_ids))


def observe_lanes(lanes: Collection[int]) -> None:
    """Runner, once per prefill or block step: the lanes its rows came from (a decode step
    passes them to ``observe_decode``)."""
    store = _store()
    if store is not None:
        store.add_many("counter", _lane_series(lanes))


def _lane_series(lanes: Collection[int]) -> list[str]:
    keys = [LANE_STEPS.key(str(lane)) for lane in sorted(lanes)]
    if len(lanes) > 1:
        keys.append(MULTI_LANE_STEPS.key())
    return keys


def observe_prefill(decision: RouteDecision | None, sampled_rows: int = 1, chunks: int = 0) -> None:
    """Runner, after an accepted prefill; ``decision`` is None when no row sampled.
    ``sampled_rows``: the rows of the call that sampled a first token; ``chunks``: the rows
    that ended before their prompt's end."""
    if chunks:
        PREFILL_CHUNKS.inc(amount=chunks)
    if decision is None:
        STEPS.inc("prefill", "none")
        return
    STEPS.inc("prefill", decision.route.value)
    if sampled_rows > 1:
        MULTI_ROW_PREFILLS.inc(decision.route.value)
    if not decision.on_device:
        HOST_FALLBACK.inc("prefill", decision.reason)


def observe_situations(found: Mapping[Situation, int]) -> None:
    """Runner, after an accepted prefill or decode that created situations (rare per step: a
    decode row enters a new KV block once every block-size steps)."""
    for situation, count in found.items():
        SITUATIONS.inc(situation.value, amount=count)


def observe_decode(
    command: ReloadCommand,
    decision: RouteDecision,
    overlapped: bool,
    lanes: Collection[int] = (),
) -> None:
    """Runner, after an accepted decode: the route, the reload command sent, the overlap and
    the lanes its rows came from (``observe_lanes``), written together: this runs every step,
    so the series keys of each combination are built once."""
    store = _store()
    if store is None:
        return
    what = (
        decision.route,
        decision.reason,
        command.reload_inputs,
        command.reload_page_table,
        command.reset_sampling_state,
        command.slot_remap is not None,
        overlapped,
        frozenset(lanes),
    )
    keys = _decode_keys.get(what)
    if keys is None:
        if len(_decode_keys) >= 1024:  # many lanes: bound the combinations kept
            _decode_keys.clear()
        keys = _decode_keys[what] = _decode_series(command, decision, overlapped, lanes)
    store.add_many("counter", keys)


_decode_keys: dict[tuple[object, ...], list[str]] = {}


def _decode_series(
    command: ReloadCommand, decision: RouteDecision, overlapped: bool, lanes: Collection[int]
) -> list[str]:
    keys = [STEPS.key("decode", decision.route.value)]
    if not decision.on_device:
        keys.append(HOST_FALLBACK.key("decode", decision.reason))
    if command.reload_inputs:
        keys.append(DECODE_COMMANDS.key("full_reload"))
    elif command.reload_page_table:
        keys.append(DECODE_COMMANDS.key("page_table_only"))
    else:
        keys.append(DECODE_COMMANDS.key("resident"))
    if command.reset_sampling_state:
        keys.append(SAMPLING_RESETS.key())
    if command.slot_remap is not None:
        keys.append(SLOT_REMAPS.key())
    if overlapped:
        keys.append(ASYNC_OVERLAPS.key())
    return keys + _lane_series(lanes)


# --------------------------------------------------------------------------- the info metric


@dataclass(frozen=True)
class PluginInfo:
    """``tt_plugin_info``: what serves this server, computed once at start-up."""

    plugin_version: str
    plugin_commit: str
    vllm_version: str
    ttnn_version: str
    tt_metal_commit: str
    mesh_device: str
    mesh_shape: str  # "RxC"
    model_class: str
    lanes: str
    max_num_seqs: str  # per lane
    max_model_len: str
    tt_options: str  # compact JSON
    weights: str  # utils/weights_identity.py
    async_scheduling: str  # "true" / "false": the configuration profile a report is keyed by
    chunked_prefill: str
    prefix_caching: str
    # TT's identity words besides the versions: the vLLM build's commit (when it records one)
    # and TP x DP (devices per model instance x instances: lanes or standard DP ranks).
    vllm_commit: str = UNKNOWN
    tensor_parallel: str = UNKNOWN
    data_parallel: str = UNKNOWN

    def labels(self) -> dict[str, str]:
        return {k: (v or UNKNOWN) for k, v in asdict(self).items()}


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def ttnn_version() -> str:
    found = _distribution_version("ttnn")
    if found:
        return found
    try:
        import ttnn
    except Exception:
        return UNKNOWN
    return str(getattr(ttnn, "__version__", None) or UNKNOWN)


def tt_metal_commit(env: Mapping[str, str] | None = None) -> str:
    """``git describe --tags --dirty`` of ``TT_METAL_HOME`` (the release tag TT names builds by,
    commits since it, ``-dirty`` for local changes; the commit itself without a tag), else its
    ``.git_commit`` / ``VERSION`` file."""
    home = envs.TT_METAL_HOME.get(env)
    if home is None or not home.is_dir():
        return UNKNOWN
    from vllm_tt_plugin.utils.checkout import git_output

    described = git_output(home, "describe", "--tags", "--dirty", "--always", "--abbrev=12")
    if described:
        return described
    for name in (".git_commit", "VERSION"):
        path = os.path.join(home, name)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text:
            return text.splitlines()[0].strip()
    return UNKNOWN


def vllm_commit() -> str:
    """The commit vLLM's build recorded (``vllm._version.__commit_id__``, ``g<hex>``)."""
    try:
        from vllm import _version
    except ImportError:
        return UNKNOWN
    commit = getattr(_version, "__commit_id__", None)
    if not isinstance(commit, str) or not commit:
        return UNKNOWN
    bare = commit[1:] if commit.startswith("g") else commit
    return bare if all(c in "0123456789abcdef" for c in bare) else commit


def plugin_version() -> str:
    from vllm_tt_plugin import __version__

    return _distribution_version("vllm-tt-plugin") or __version__


@dataclass(frozen=True)
class ServingProfile:
    """The vLLM settings besides the TT options that change what a conformance run measures."""

    model: str
    revision: str | None
    async_scheduling: bool
    chunked_prefill: bool
    prefix_caching: bool


def _flag(value: bool) -> str:
    return "true" if value else "false"


def collect_info(
    options: TTOptions,
    mesh: MeshSpec,
    model_cls: type,
    lanes: int,
    seqs_per_lane: int,
    max_model_len: int,
    serving: ServingProfile,
    data_parallel: int = 1,
) -> PluginInfo:
    """``data_parallel``: model instances on the mesh (lanes or standard DP ranks); each spans
    the mesh's devices divided among them (TP)."""
    from vllm import __version__ as vllm_version

    from vllm_tt_plugin.utils.checkout import source_commit
    from vllm_tt_plugin.utils.weights_identity import weights_identity

    return PluginInfo(
        plugin_version=plugin_version(),
        plugin_commit=source_commit(),
        vllm_version=vllm_version,
        ttnn_version=ttnn_version(),
        tt_metal_commit=tt_metal_commit(),
        mesh_device=mesh.name,
        mesh_shape=f"{mesh.rows}x{mesh.cols}",
        model_class=f"{model_cls.__module__}.{model_cls.__qualname__}",
        lanes=str(lanes),
        max_num_seqs=str(seqs_per_lane),
        max_model_len=str(max_model_len),
        tt_options=json.dumps(options.as_dict(), sort_keys=True, separators=(",", ":")),
        weights=weights_identity(serving.model, serving.revision),
        async_scheduling=_flag(serving.async_scheduling),
        chunked_prefill=_flag(serving.chunked_prefill),
        prefix_caching=_flag(serving.prefix_caching),
        vllm_commit=vllm_commit(),
        tensor_parallel=str(max(1, mesh.rows * mesh.cols // max(1, data_parallel))),
        data_parallel=str(max(1, data_parallel)),
    )


# Series other modules own, started at zero when the worker publishes (host_phases registers
# its clock here: it imports this module, never the reverse).
_at_publish: list[Callable[[], None]] = []


def at_publish(start: Callable[[], None]) -> None:
    """Run ``start`` (which creates its module's series at zero) when the worker publishes."""
    if start not in _at_publish:
        _at_publish.append(start)


def publish_info(info: PluginInfo) -> None:
    """Worker, once the launch is settled (after KV sizing fixed max_model_len)."""
    store = _store()
    if store is None:
        logger.info("TT plugin metrics are off (%s=0 or no metrics directory)", ENV_METRICS)
        return
    labels = info.labels()
    key = _key(INFO_NAME, INFO_NAME, tuple(labels), tuple(labels.values()), INFO_HELP)
    store.set("gauge_max", key, 1.0)
    # Start the fixed series at zero so that a scrape shows every counter from the start.
    for kind in ("prefill", "decode"):
        for route in ("device", "host"):
            STEPS.touch(kind, route)
    for command in ("full_reload", "page_table_only", "resident"):
        DECODE_COMMANDS.touch(command)
    for route in ("device", "host"):
        MULTI_ROW_PREFILLS.touch(route)
    for counter in (SAMPLING_RESETS, SLOT_REMAPS, ASYNC_OVERLAPS, MULTI_LANE_STEPS, PREEMPTED,
                    RESUMED, PREFILL_CHUNKS):  # fmt: skip
        counter.touch()
    for lane in range(int(info.lanes)):
        LANE_STEPS.touch(str(lane))
    for situation in Situation:
        SITUATIONS.touch(situation.value)
    for start in _at_publish:
        start()
    logger.info("TT plugin metrics published (%s): %s", store.directory, json.dumps(labels))
