"""gpufleet from Python: the embedded catalog's offers, the placer, the
advisors (``fit``, ``mix``), the simulator, managed jobs (``run``,
:mod:`gpufleet.jobs`, ``check``, :class:`FakeCloud`), the fleet's instances
and spend (``launch``, ``ls``, ``terminate``, ``reap``, ``costs``,
``reconcile``: :mod:`gpufleet.fleet`) and services
(:mod:`gpufleet.services`), through the same Rust
crates as the ``gpufleet`` CLI (``gpufleet._native``).

>>> import gpufleet
>>> p = gpufleet.place(gpu=["A100:8"], hours=30, deadline="72h")
>>> p.decision  # the line ``gpufleet place`` prints first
>>> p.chosen.expected_cost_usd
>>> cloud = gpufleet.FakeCloud()
>>> done = gpufleet.run(gpufleet.Job(gpu=["A10G:1"], hours=6, deadline="24h"),
...                     provider=cloud, script=["2h preempt"])
>>> done.state, done.preemptions, done.cost_so_far_usd

Errors are exceptions under :class:`gpufleet.Error`, one class per kind;
bad arguments raise :class:`ValueError` naming the argument.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import (
    AlreadyExists,
    Conflict,
    Error,
    FakeCloud,
    InsufficientCapacity,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    Timeout,
    Unauthenticated,
    Unavailable,
    Unexpected,
    Unsupported,
)

__version__: str = _native.__version__

__all__ = [
    "AlreadyExists",
    "CloudCheck",
    "Conflict",
    "Config",
    "Error",
    "FakeCloud",
    "Fit",
    "InsufficientCapacity",
    "InvalidInput",
    "Job",
    "JobFailed",
    "JobResult",
    "Mix",
    "MixOption",
    "NotFound",
    "Offer",
    "PermissionDenied",
    "Placement",
    "Plan",
    "PolicyResult",
    "QuotaExceeded",
    "RateLimited",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "Unexpected",
    "Simulation",
    "Unsupported",
    "check",
    "check_async",
    "costs",
    "fit",
    "fleet",
    "jobs",
    "launch",
    "ls",
    "mix",
    "offers",
    "place",
    "reap",
    "reconcile",
    "run",
    "run_async",
    "services",
    "simulate",
    "terminate",
]


Provider = Union[str, FakeCloud]
"""Where managed jobs run and are recorded: ``"live"`` (the configured
clouds and ledger), ``"fake"`` (the CLI's fake cloud) or a :class:`FakeCloud`."""


def _settings(settings: Optional[Mapping[str, Any]]) -> Optional[Dict[str, str]]:
    if settings is None:
        return None
    return {str(k): str(v) for k, v in settings.items()}


class _Row:
    """A row of a report: its fields as attributes, ``to_dict()`` the row
    as the CLI's ``-o json`` prints it."""

    __slots__ = ("_row",)

    def __init__(self, row: Dict[str, Any]) -> None:
        self._row = row

    def __getattr__(self, name: str) -> Any:
        try:
            return self._row[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no field '{name}'; its fields: {', '.join(self._row)}"
            ) from None

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._row)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._row!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Row) and type(self) is type(other) and self._row == other._row


class Offer(_Row):
    """One offer of the catalog: a row of ``gpufleet offers -o json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    cloud: str
    region: str
    zone: Optional[str]
    instance_type: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: float
    capacity: str
    price_per_hour_usd: float
    price_per_gpu_hour_usd: float
    observed_at: str
    effective_at: Optional[str]
    source: str
    interruption_bucket: Optional[str]
    gpu_link: str
    fabric: str
    network_gbps: Optional[int]


class Plan(_Row):
    """One pool the placer considered: a row of ``gpufleet place -o json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    rank: int
    cloud: str
    region: str
    zone: Optional[str]
    instance_type: str
    capacity: str
    gpu_model: str
    gpu_count: int
    price_per_hour_usd: float
    expected_cost_usd: Optional[float]
    evaluated: bool
    index_usd_per_work_hour: float
    expected_hours: float
    p_deadline: float
    interruption_rate_per_hour: float
    checkpoint_interval_hours: float
    work_hours: float
    feasible: bool
    problems: List[str]
    hazard_signals: List[str]
    explanation: str
    source: str
    observed_at: str
    effective_at: Optional[str]
    chosen: bool
    shortlisted: bool
    fallback: bool
    ruled_out: bool


class Config(_Row):
    """One GPU configuration that holds a model: a row of ``configs`` in
    ``gpufleet fit -o json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    cloud: str
    instance_type: str
    gpu_model: str
    gpus_per_node: int
    nodes: int
    gpus_used: int
    gpu_memory_gib: int
    need_per_gpu_gib: float
    utilisation: float
    layout: str
    region: str
    zone: Optional[str]
    on_demand_per_hour_usd: Optional[float]
    spot_per_hour_usd: Optional[float]
    price_source: str


@dataclass(frozen=True)
class Fit:
    """Which GPU configurations hold a model: ``total_gib`` needed, the
    ``memory`` lines it adds up from, and the ``configs`` that hold it,
    cheapest first (the document of ``gpufleet fit -o json``)."""

    total_gib: float
    configs: List[Config]
    doc: Dict[str, Any] = field(repr=False)

    @property
    def memory(self) -> List[Dict[str, Any]]:
        """The memory lines: item, bytes, GiB, whether sharded, formula, basis."""
        lines: List[Dict[str, Any]] = self.doc["memory"]
        return lines

    def to_dict(self) -> Dict[str, Any]:
        """The document of ``gpufleet fit -o json``."""
        return dict(self.doc)


@dataclass(frozen=True)
class Placement:
    """What the placer decided: ``decision`` (the line ``place`` prints
    first; ``None`` when no pool can run the job) and the ``plans`` it
    chose between, ranked."""

    decision: Optional[str]
    plans: List[Plan]

    @property
    def chosen(self) -> Optional[Plan]:
        """The plan decided on, if any."""
        return next((p for p in self.plans if p.chosen), None)

    def to_dict(self) -> Dict[str, Any]:
        """``{"decision": ..., "plans": [row, ...]}``, the rows those of
        ``gpufleet place -o json``."""
        return {"decision": self.decision, "plans": [p.to_dict() for p in self.plans]}


@dataclass(frozen=True)
class Job:
    """A job as ``gpufleet place`` takes it in words: GPU options
    (``"MODEL:COUNT"``, any of them, the first the one ``hours`` is measured
    on), hours of work, and the constraints; or a job file
    (:meth:`Job.from_file`)."""

    gpu: Sequence[str]
    hours: float
    deadline: Optional[str] = None
    budget: Optional[str] = None
    cloud: Optional[Sequence[str]] = None
    region: Optional[Sequence[str]] = None
    checkpoint_interval: str = "auto"
    checkpoint_cost: str = "2m"
    restart_overhead: str = "10m"
    not_interruptible: bool = False
    name: str = "python"
    file: Optional[str] = None
    setup: Optional[str] = None
    run: Optional[str] = None
    checkpoint: Optional[str] = None

    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Job":
        """The job in a job file (TOML, or JSON), as ``gpufleet place --job``
        and ``gpufleet run --job`` read it: its fields show what the file
        says, and placing or running it uses the file itself (``file``),
        keys a ``Job`` has no field for included; checked when placed."""
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ValueError(f"path: no job file '{path}'")
        return cls(**_native.job_file_words(path), file=path)

    def _words(self) -> Dict[str, Any]:
        if isinstance(self.gpu, str):
            raise TypeError("gpu: expected a list of GPU options such as ['A100:8'], not a string")
        return {
            "gpu": list(self.gpu),
            "hours": float(self.hours),
            "deadline": self.deadline,
            "budget": None if self.budget is None else str(self.budget),
            "cloud": None if self.cloud is None else list(self.cloud),
            "region": None if self.region is None else list(self.region),
            "checkpoint_interval": self.checkpoint_interval,
            "checkpoint_cost": self.checkpoint_cost,
            "restart_overhead": self.restart_overhead,
            "not_interruptible": bool(self.not_interruptible),
            "name": self.name,
        }

    def to_file(self) -> Dict[str, Any]:
        """The job file this job is (its keys those of a TOML or JSON job
        file), as ``gpufleet run --job`` would read it."""
        if self.file is not None:
            raise ValueError(f"job: this job is the file '{self.file}'; read it there")
        words = self._words()
        gpus = []
        for g in words["gpu"]:
            model, _, count = str(g).partition(":")
            try:
                n = int(count) if count else 1
            except ValueError:
                raise ValueError(f"gpu: invalid GPU option '{g}': expected MODEL:COUNT such as A100:8") from None
            gpus.append({"model": model, "count": n})
        doc: Dict[str, Any] = {
            "name": self.name,
            "hours": words["hours"],
            "gpu": gpus,
            "checkpoint_interval": self.checkpoint_interval,
            "checkpoint_cost": self.checkpoint_cost,
            "restart_overhead": self.restart_overhead,
        }
        if self.not_interruptible:
            doc["interruptible"] = False
        for key, value in (
            ("deadline", self.deadline),
            ("budget", words["budget"]),
            ("clouds", words["cloud"]),
            ("regions", words["region"]),
            ("setup", self.setup),
            ("run", self.run),
            ("checkpoint", self.checkpoint),
        ):
            if value is not None:
                doc[key] = value
        return doc


def offers(
    *,
    gpu: Optional[Sequence[str]] = None,
    capacity: Optional[str] = None,
    cloud: Optional[Sequence[str]] = None,
    region: Optional[Sequence[str]] = None,
    sort: str = "price",
    limit: int = 20,
) -> List[Offer]:
    """The embedded catalog's offers, as ``gpufleet offers`` lists them:
    ``gpu`` options (``"H100:8"``), ``capacity`` (``"spot"`` or
    ``"on-demand"``), clouds and regions; cheapest first (``sort="price"``
    or ``"price_per_gpu"``), at most ``limit`` (0 for all)."""
    if isinstance(gpu, str) or isinstance(cloud, str) or isinstance(region, str):
        raise TypeError("gpu, cloud and region take lists, such as gpu=['H100:8']")
    rows = _native.offers(
        gpu=None if gpu is None else list(gpu),
        capacity=capacity,
        cloud=None if cloud is None else list(cloud),
        region=None if region is None else list(region),
        sort=sort,
        limit=limit,
    )
    return [Offer(r) for r in rows]


def place(
    job: Optional[Job] = None,
    *,
    limit: int = 10,
    provider: Optional["Provider"] = None,
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
    **words: Any,
) -> Placement:
    """Where ``job`` (or the CLI's words as keywords:
    ``place(gpu=["A100:8"], hours=30, deadline="72h")``) is cheapest to
    finish, decided by the placer ``gpufleet place`` uses, on the embedded
    catalog. With a ``provider`` (``"live"``, ``"fake"`` or a
    :class:`FakeCloud`; ``config`` and ``settings`` as for :func:`run`) it
    reads what ``gpufleet place`` reads: that ledger's observed
    interruptions, the config's clouds for a job that names none, and the
    fake clock on a fake cloud. Without one it places as ``place
    --no-ledger`` does."""
    if job is not None and words:
        raise TypeError(f"place: give a Job or keywords, not both (got {', '.join(words)})")
    if job is None:
        try:
            job = Job(**words)
        except TypeError as e:
            raise TypeError(f"place: {e}") from None
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit: expected a whole number of plans, 0 for all; got {limit!r}")
    where: Dict[str, Any] = {
        "provider": provider,
        "config": None if config is None else os.fspath(config),
        "settings": _settings(settings),
    }
    if job.file is not None:
        out = _native.place_file(job.file, limit=limit, **where)
    else:
        out = _native.place(limit=limit, **job._words(), **where)
    return Placement(decision=out["decision"], plans=[Plan(r) for r in out["rows"]])


def fit(
    *,
    params: Optional[str] = None,
    model: Optional[str] = None,
    precision: str = "bf16",
    training: Optional[str] = None,
    context: Optional[int] = None,
    batch: int = 1,
    layers: Optional[int] = None,
    kv_heads: Optional[int] = None,
    head_dim: Optional[int] = None,
    hidden: Optional[int] = None,
    activation_checkpointing: bool = True,
    cloud: Optional[Sequence[str]] = None,
    region: Optional[Sequence[str]] = None,
    gpu: Optional[Sequence[str]] = None,
    max_nodes: Optional[int] = None,
    limit: int = 15,
) -> Fit:
    """Which GPU configurations hold a model, cheapest first, as ``gpufleet
    fit`` sizes it: ``params`` (``"7B"``) or a known ``model``
    (``"llama-3-8b"``), ``precision``, ``training`` (``None`` for
    inference, ``"full"`` or ``"lora"``), ``context`` and ``batch``; only
    these clouds, regions and GPU models; at most ``max_nodes`` per
    configuration and ``limit`` configurations (0 for all)."""
    for name, value in (("cloud", cloud), ("region", region), ("gpu", gpu)):
        if isinstance(value, str):
            raise TypeError(f"{name}: expected a list, such as {name}=[{value!r}]")
    doc = _native.fit(
        params=params,
        model=model,
        precision=precision,
        training=training,
        context=context,
        batch=batch,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden=hidden,
        activation_checkpointing=activation_checkpointing,
        cloud=None if cloud is None else list(cloud),
        region=None if region is None else list(region),
        gpu=None if gpu is None else list(gpu),
        max_nodes=max_nodes,
        limit=limit,
    )
    return Fit(total_gib=doc["total_gib"], configs=[Config(c) for c in doc["configs"]], doc=doc)


class MixOption(_Row):
    """One way to buy the demand: a row of ``options`` in ``gpufleet mix -o
    json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    name: str
    term: Optional[str]
    committed: int
    committed_utilisation: Optional[float]
    on_demand_instance_hours: float
    spot_instance_hours: float
    cost_over_profile_usd: float
    monthly_usd: float
    monthly_saving_usd: float
    saving_share: float


@dataclass(frozen=True)
class Mix:
    """How much of a demand profile to commit to, run on-demand and run on
    spot: every ``option`` priced, the ``recommended`` one, and the inputs
    and terms they rest on (the document of ``gpufleet mix -o json``)."""

    options: List[MixOption]
    recommended: MixOption
    doc: Dict[str, Any] = field(repr=False)

    @property
    def inputs(self) -> List[Dict[str, Any]]:
        """What the options were computed on: name, value and where it came from."""
        rows: List[Dict[str, Any]] = self.doc["inputs"]
        return rows

    @property
    def terms(self) -> List[Dict[str, Any]]:
        """The commitment terms with their prices and break-even utilisation."""
        rows: List[Dict[str, Any]] = self.doc["terms"]
        return rows

    def to_dict(self) -> Dict[str, Any]:
        """The document of ``gpufleet mix -o json``."""
        return dict(self.doc)


def _percent(arg: str, value: Union[None, int, float, str]) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{arg}: expected a number or a string such as '30%', got {type(value).__name__}")
    return str(value)


def mix(
    profile: Union[str, "os.PathLike[str]"],
    *,
    region: str,
    gpu: Optional[str] = None,
    instance_type: Optional[str] = None,
    cloud: Optional[str] = None,
    interruptible_share: Union[int, float, str] = 0,
    discount_1y: Union[None, int, float, str] = None,
    discount_3y: Union[None, int, float, str] = None,
    on_demand_price: Union[None, int, float, str] = None,
    spot_price: Union[None, int, float, str] = None,
) -> Mix:
    """How much of the demand in ``profile`` (a CSV of ``time,instances``,
    hourly or finer, at least a week) to commit to for 1 or 3 years, run
    on-demand and run on spot, as ``gpufleet mix`` prices it: the instance
    type (or the cheapest on-demand one with ``gpu``) in ``region``, the
    share that tolerates interruption (``0.3`` or ``"30%"``), your discounts
    (percent off on-demand) and prices (USD per hour) where you have them."""
    share = _percent("interruptible_share", interruptible_share)
    doc = _native.mix(
        os.fspath(profile),
        region=region,
        gpu=gpu,
        instance_type=instance_type,
        cloud=cloud,
        interruptible_share="0" if share in ("0", "0.0") else share,
        discount_1y=_percent("discount_1y", discount_1y),
        discount_3y=_percent("discount_3y", discount_3y),
        on_demand_price=_percent("on_demand_price", on_demand_price),
        spot_price=_percent("spot_price", spot_price),
    )
    return Mix(
        options=[MixOption(o) for o in doc["options"]],
        recommended=MixOption(doc["recommended"]),
        doc=doc,
    )


class PolicyResult(_Row):
    """How one policy did over every start of a scenario: a row of
    ``results`` in ``gpufleet simulate -o json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    policy: str
    runs: int
    mean_cost_usd: float
    p90_cost_usd: float
    cost_vs_optimum: float
    deadline_misses: int
    mean_hours_late: float
    mean_preemptions: float
    mean_moves: float
    past_traces: int


@dataclass(frozen=True)
class Simulation:
    """One scenario replayed on availability traces: the pools it ran over,
    each policy's ``results``, and the ``notes`` the CLI prints beside them
    (traces that start at different times, ticks that round the job)."""

    results: List[PolicyResult]
    pools: List[str]
    notes: List[str]
    doc: Dict[str, Any] = field(repr=False)

    def result(self, policy: str) -> PolicyResult:
        """The result of ``policy`` (``"gpufleet"``, ``"on-demand"``, ...)."""
        for r in self.results:
            if r.policy == policy:
                return r
        raise KeyError(f"no policy '{policy}' in this simulation; it ran: {', '.join(r.policy for r in self.results)}")

    def to_dict(self) -> Dict[str, Any]:
        """The scenario's object in ``gpufleet simulate -o json``."""
        return dict(self.doc)


def simulate(
    traces: Union[str, "os.PathLike[str]"],
    *,
    pools: Union[None, str, "os.PathLike[str]"] = None,
    instance_type: Optional[Sequence[str]] = None,
    zone: Optional[str] = None,
    job_hours: float = 24.0,
    deadline_hours: float = 36.0,
    changeover_hours: float = 0.1667,
    starts: int = 50,
    policies: Optional[Sequence[str]] = None,
) -> Simulation:
    """Replays one job on the spot availability traces in ``traces`` (a
    directory with a ``pools.csv`` manifest, or ``pools``) for each policy,
    from ``starts`` offsets spread over the traces, as ``gpufleet simulate``
    does: its pools (``instance_type``, ``zone``), hours of work, deadline
    and changeover (hours per start or move)."""
    for name, value in (("instance_type", instance_type), ("policies", policies)):
        if isinstance(value, str):
            raise TypeError(f"{name}: expected a list, such as {name}=[{value!r}]")
    if isinstance(starts, bool) or not isinstance(starts, int):
        raise TypeError(f"starts: expected a whole number, got {starts!r}")
    out = _native.simulate(
        os.fspath(traces),
        pools=None if pools is None else os.fspath(pools),
        instance_type=None if instance_type is None else list(instance_type),
        zone=zone,
        job_hours=float(job_hours),
        deadline_hours=float(deadline_hours),
        changeover_hours=float(changeover_hours),
        starts=starts,
        policies=None if policies is None else list(policies),
    )
    doc = out["rows"][0]
    return Simulation(
        results=[PolicyResult(r) for r in doc["results"]],
        pools=list(doc["pools"]),
        notes=list(out["notes"]),
        doc=doc,
    )


class JobResult(_Row):
    """A managed job as it ended (or stands): its row of ``gpufleet jobs ls
    -o json``, with ``outcome`` (state, detail, progress) and the
    ``warnings`` said while it ran."""

    __slots__ = ("outcome", "warnings")

    # The row's fields (read through the row; declared for type checkers).
    id: str
    name: str
    state: str
    pool: Optional[str]
    started_at: str
    updated_at: str
    attempts: int
    preemptions: int
    ended_on_request: int
    restarts: int
    moves: int
    progress_hours: float
    cost_so_far_usd: float
    detail: str
    driven_by: Optional[str]

    def __init__(self, row: Dict[str, Any], outcome: Dict[str, Any], warnings: List[str]) -> None:
        super().__init__(row)
        self.outcome = outcome
        self.warnings = warnings

    @property
    def succeeded(self) -> bool:
        """Whether the job finished its work."""
        return self.state == "succeeded"


class JobFailed(Error):
    """A managed job ended without succeeding (``run(..., check=True)``):
    ``result`` is how it ended."""

    def __init__(self, result: JobResult) -> None:
        super().__init__(f"job {result.id} {result.state}: {result.detail}")
        self.result = result
        self.kind = "job-failed"
        self.cloud = None
        self.operation = "run"
        self.message = f"job {result.id} {result.state}: {result.detail}"


def _job_args(job: Union[Job, str, "os.PathLike[str]"]) -> Dict[str, Optional[str]]:
    if isinstance(job, Job):
        if job.file is not None:
            return {"path": job.file, "doc": None}
        return {"path": None, "doc": json.dumps(job.to_file())}
    if isinstance(job, (str, os.PathLike)):
        return {"path": os.fspath(job), "doc": None}
    raise TypeError(f"job: expected a gpufleet.Job or a job file's path, got {type(job).__name__}")


def run(
    job: Union[Job, str, "os.PathLike[str]"],
    *,
    provider: Provider = "live",
    id: Optional[str] = None,
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
    script: Optional[Sequence[str]] = None,
    check: bool = True,
    on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> JobResult:
    """Runs a managed job until it is done, as ``gpufleet run --job``: it is
    placed where it is cheapest to finish, kept going across interruptions
    (moved, restarted from its checkpoint) and recorded in the ledger. The
    same job under the same ``id`` finds the job it made: run it again after
    a crash and it drives it on. ``provider`` is ``"live"`` (the configured
    clouds), ``"fake"`` (the CLI's fake cloud) or a :class:`FakeCloud`;
    ``config`` a config file and ``settings`` its keys (``ledger``,
    ``clouds``, ``owner``, ...) over it; ``script`` lines such as
    ``"2h preempt"`` play on the fake cloud. With ``check`` (the default) a
    job that fails raises :class:`JobFailed` (a cancelled one returns, as
    ``gpufleet run`` exits 0 for it: someone meant it). ``on_event`` is
    called with each transition the ledger records (``at``, ``state``,
    ``pool``, ``attempt``, ``instances``, ``progress_hours``, ``detail``; the
    events of ``gpufleet jobs show``), about every second and the rest when
    the job ends, on the calling thread; an exception it raises stops the
    drive as Ctrl-C does. Ctrl-C leaves the job and its instances to be
    driven again (or cancelled)."""
    out = _native.run(
        **_job_args(job),
        provider=provider,
        id=id,
        config=None if config is None else os.fspath(config),
        settings=_settings(settings),
        script=None if script is None else [str(line) for line in script],
        on_event=on_event,
    )
    result = JobResult(out["row"], out["outcome"], list(out["warnings"]))
    if check and result.state not in ("succeeded", "cancelled"):
        raise JobFailed(result)
    return result


async def run_async(
    job: Union[Job, str, "os.PathLike[str]"],
    *,
    provider: Provider = "live",
    id: Optional[str] = None,
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
    script: Optional[Sequence[str]] = None,
    check: bool = True,
    on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> JobResult:
    """:func:`run`, awaitable: the drive runs on a worker thread with the
    GIL released, so the event loop goes on. Cancelling the awaiting task
    does not stop the drive (use :func:`gpufleet.jobs.cancel`)."""
    return await asyncio.to_thread(
        run,
        job,
        provider=provider,
        id=id,
        config=config,
        settings=settings,
        script=script,
        check=check,
        on_event=on_event,
    )


class CloudCheck(_Row):
    """Whether one cloud is usable from here: a row of ``gpufleet check -o
    json``."""

    __slots__ = ()

    # The row's fields (read through the row; declared for type checkers).
    cloud: str
    usable: bool
    credentials: Optional[str]
    identity: Optional[str]
    scope: Optional[str]
    endpoints: List[str]
    elapsed_ms: int
    problem: Optional[str]
    advice: Optional[str]


def check(
    *,
    clouds: Optional[Sequence[str]] = None,
    timeout: str = "3s",
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> List[CloudCheck]:
    """Which clouds are usable from here, as whom, and what to do about the
    others, as ``gpufleet check``: each of ``clouds`` (default: the
    configured ones) checked at once within ``timeout`` (1s to 60s). With a
    :class:`FakeCloud` as ``provider``, its clouds are usable."""
    if isinstance(clouds, str):
        raise TypeError(f"clouds: expected a list, such as clouds=[{clouds!r}]")
    rows = _native.check(
        provider=provider,
        clouds=None if clouds is None else list(clouds),
        timeout=timeout,
        config=None if config is None else os.fspath(config),
        settings=_settings(settings),
    )
    return [CloudCheck(r) for r in rows]


async def check_async(
    *,
    clouds: Optional[Sequence[str]] = None,
    timeout: str = "3s",
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> List[CloudCheck]:
    """:func:`check`, awaitable (on a worker thread, the GIL released)."""
    return await asyncio.to_thread(
        check, clouds=clouds, timeout=timeout, provider=provider, config=config, settings=settings
    )


from . import jobs  # noqa: E402  (the module uses the names above)
from . import fleet, services  # noqa: E402
from .fleet import costs, launch, ls, reap, reconcile, terminate  # noqa: E402
