"""Managed jobs in the ledger, as ``gpufleet jobs`` shows and ends them:
:func:`ls`, :func:`show`, :func:`cancel` (and ``*_async`` variants).

``provider`` is ``"live"`` (the configured clouds and ledger), ``"fake"``
(the CLI's fake cloud) or a :class:`gpufleet.FakeCloud` (its own ledger);
``config`` and ``settings`` layer over the environment and the config file
as the CLI's flags do.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _native
from . import JobResult, Provider, _settings

__all__ = ["JobList", "JobShow", "ls", "ls_async", "show", "show_async", "cancel", "cancel_async"]


@dataclass(frozen=True)
class JobList:
    """Every job in the ledger (``jobs``, the rows of ``gpufleet jobs ls -o
    json``) and what each completed job cost: every job's cost over the
    ones that succeeded (``None`` until one has)."""

    jobs: List[JobResult]
    cost_per_completed_job_usd: Optional[str]

    def to_dict(self) -> Dict[str, Any]:
        """``{"jobs": [row, ...], "cost_per_completed_job_usd": ...}``."""
        return {
            "jobs": [j.to_dict() for j in self.jobs],
            "cost_per_completed_job_usd": self.cost_per_completed_job_usd,
        }


@dataclass(frozen=True)
class JobShow:
    """One job: ``job`` (its row, as :func:`ls` gives it), the ``pools`` it
    ran in, ``events`` (every transition, oldest first) and the whole
    document of ``gpufleet jobs show ID -o json`` in ``doc``."""

    job: JobResult
    pools: List[str]
    events: List[Dict[str, Any]]
    doc: Dict[str, Any] = field(repr=False)

    def to_dict(self) -> Dict[str, Any]:
        """The document of ``gpufleet jobs show ID -o json``."""
        return dict(self.doc)


def _where(
    provider: Provider,
    config: Union[None, str, "os.PathLike[str]"],
    settings: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    return {
        "provider": provider,
        "config": None if config is None else os.fspath(config),
        "settings": _settings(settings),
    }


def ls(
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> JobList:
    """Every job in the ledger with its state, pool, preemptions, moves and
    cost, as ``gpufleet jobs ls``."""
    out = _native.jobs_ls(**_where(provider, config, settings))
    return JobList(
        jobs=[JobResult(r, {}, []) for r in out["rows"]],
        cost_per_completed_job_usd=out["cost_per_completed_job_usd"],
    )


def show(
    id: str,
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> JobShow:
    """Job ``id``'s summary and every transition it went through, as
    ``gpufleet jobs show ID``; an unknown id raises
    :class:`gpufleet.InvalidInput`."""
    doc = _native.jobs_show(id, **_where(provider, config, settings))
    return JobShow(
        job=JobResult(doc["job"], {}, []),
        pools=list(doc["pools"]),
        events=list(doc["events"]),
        doc=doc,
    )


def cancel(
    id: str,
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
    any_owner: bool = False,
) -> Dict[str, Any]:
    """Cancels job ``id`` as ``gpufleet jobs cancel``: its instances are
    ended and ``cancelled`` is recorded, final (a controller driving it
    stops). Only the configured owner's jobs unless ``any_owner``. Returns
    the outcome (``state``, ``detail``) and ``warnings`` (clouds that did
    not answer and were not swept)."""
    out = _native.jobs_cancel(id, any_owner=any_owner, **_where(provider, config, settings))
    return {**out["outcome"], "warnings": list(out["warnings"])}


async def ls_async(
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> JobList:
    """:func:`ls`, awaitable (on a worker thread, the GIL released)."""
    return await asyncio.to_thread(ls, provider=provider, config=config, settings=settings)


async def show_async(
    id: str,
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> JobShow:
    """:func:`show`, awaitable (on a worker thread, the GIL released)."""
    return await asyncio.to_thread(show, id, provider=provider, config=config, settings=settings)


async def cancel_async(
    id: str,
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
    any_owner: bool = False,
) -> Dict[str, Any]:
    """:func:`cancel`, awaitable (on a worker thread, the GIL released)."""
    return await asyncio.to_thread(
        cancel, id, provider=provider, config=config, settings=settings, any_owner=any_owner
    )
