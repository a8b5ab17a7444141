"""gpufleet from Python: the embedded catalog's offers and the placer that
``gpufleet place`` uses, through the same Rust crates (``gpufleet._native``).

>>> import gpufleet
>>> p = gpufleet.place(gpu=["A100:8"], hours=30, deadline="72h")
>>> p.decision  # the line ``gpufleet place`` prints first
>>> p.chosen.expected_cost_usd

Errors are exceptions under :class:`gpufleet.Error`, one class per kind;
bad arguments raise :class:`ValueError` naming the argument.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native
from ._native import (
    AlreadyExists,
    Conflict,
    Error,
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
    "Conflict",
    "Config",
    "Error",
    "Fit",
    "InsufficientCapacity",
    "InvalidInput",
    "Job",
    "NotFound",
    "Offer",
    "PermissionDenied",
    "Placement",
    "Plan",
    "QuotaExceeded",
    "RateLimited",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "Unexpected",
    "Unsupported",
    "fit",
    "offers",
    "place",
]


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

    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Job":
        """The job in a job file (TOML, or JSON), as ``gpufleet place --job``
        and ``gpufleet run --job`` read it: checked when placed."""
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ValueError(f"path: no job file '{path}'")
        return cls(gpu=(), hours=0.0, file=path)

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
    ``"on_demand"``), clouds and regions; cheapest first (``sort="price"``
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


def place(job: Optional[Job] = None, *, limit: int = 10, **words: Any) -> Placement:
    """Where ``job`` (or the CLI's words as keywords:
    ``place(gpu=["A100:8"], hours=30, deadline="72h")``) is cheapest to
    finish, decided by the placer ``gpufleet place`` uses, on the embedded
    catalog. The ledger's observed interruptions are not read (as
    ``place --no-ledger``)."""
    if job is not None and words:
        raise TypeError(f"place: give a Job or keywords, not both (got {', '.join(words)})")
    if job is None:
        try:
            job = Job(**words)
        except TypeError as e:
            raise TypeError(f"place: {e}") from None
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit: expected a whole number of plans, 0 for all; got {limit!r}")
    if job.file is not None:
        out = _native.place_file(job.file, limit=limit)
    else:
        out = _native.place(limit=limit, **job._words())
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
