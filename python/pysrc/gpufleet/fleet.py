"""The fleet's instances and spend, as the operator commands show and act
on them: :func:`launch`, :func:`ls`, :func:`terminate`, :func:`reap`,
:func:`costs` and :func:`reconcile`.

Each returns the document the CLI's command prints with ``-o json`` (a
dict), with ``warnings`` beside its keys where clouds are read: what opening
them skipped, and the clouds that did not answer (a partial answer, as the
CLI's exit 4). ``provider`` is ``"live"``, ``"fake"`` or a
:class:`gpufleet.FakeCloud`; ``config`` and ``settings`` layer over the
environment and the config file as the CLI's flags do. Each acts on the
configured owner's instances unless told ``any_owner``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import Job, Provider, _job_args, _native
from .jobs import _where

__all__ = ["costs", "launch", "ls", "reap", "reconcile", "terminate"]

PathLike = Union[None, str, "os.PathLike[str]"]


def launch(
    job: Union[None, Job, str, "os.PathLike[str]"] = None,
    *,
    pool: Optional[str] = None,
    name: Optional[str] = None,
    key: Optional[str] = None,
    image: Optional[str] = None,
    count: int = 1,
    placement_group: Optional[str] = None,
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Launches ``count`` instances as ``gpufleet launch``: in ``pool``
    (``cloud:region[/zone]:type:capacity``, as :func:`gpufleet.offers` and
    :func:`gpufleet.place` give it), or where ``job`` is cheapest to
    finish, under the idempotency key of ``name`` (or ``key``): launching
    the same again finds what it launched (``already_launched``). Ctrl-C
    rolls the launch back (its instances terminated) and raises
    :class:`KeyboardInterrupt`."""
    args = _job_args(job) if job is not None else {"path": None, "doc": None}
    return _native.launch(
        pool=pool,
        name=name,
        key=key,
        image=image,
        count=count,
        placement_group=placement_group,
        path=args["path"],
        doc=args["doc"],
        **_where(provider, config, settings),
    )


def ls(
    *,
    job: Optional[str] = None,
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """The managed instances (of ``job``, when given) with their price, cost
    so far, GPU use and expiry, as ``gpufleet ls``: ``instances`` (its
    rows) and ``warnings``. The ends the clouds caused are recorded in the
    ledger on the way."""
    return _native.ls(job=job, **_where(provider, config, settings))


def terminate(
    ids: Optional[Sequence[str]] = None,
    *,
    job: Optional[str] = None,
    tags: Optional[Mapping[str, str]] = None,
    any_owner: bool = False,
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Terminates instances by id (as :func:`ls` gives them, or as the
    cloud shows them), every instance of ``job``, or those with ``tags``,
    as ``gpufleet terminate --yes``, and the placement groups they leave
    empty; each end is recorded. Another owner's instance is refused (by
    id) or left alone (by job or tag) unless ``any_owner``. Nothing matching
    raises :class:`gpufleet.NotFound`; an instance the cloud would not
    terminate raises once the others are."""
    if isinstance(ids, str):
        raise TypeError(f"ids: expected a list, such as ids=[{ids!r}]")
    return _native.terminate(
        None if ids is None else list(ids),
        job=job,
        tags=None if tags is None else {str(k): str(v) for k, v in tags.items()},
        any_owner=any_owner,
        **_where(provider, config, settings),
    )


def reap(
    *,
    idle: Optional[str] = None,
    below: Optional[int] = None,
    grace: str = "15m",
    yes: bool = False,
    any_owner: bool = False,
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """The forgotten instances, as ``gpufleet reap``: past their expiry
    (unless a controller drives their job), with ``idle`` (at least
    ``5m``) silent that long, and with ``below`` too, GPUs under that
    percent that long (no summary newer than ``grace``: ``unknown``, never
    reaped). A dry run (``dry_run``: ``True``) unless ``yes``; the
    candidates' ``so_far_usd`` and ``per_day_usd`` beside."""
    return _native.reap(
        idle=idle,
        below=below,
        grace=grace,
        yes=yes,
        any_owner=any_owner,
        **_where(provider, config, settings),
    )


def costs(
    *,
    by: str = "team",
    since: str = "30d",
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """What the ledger says was spent, as ``gpufleet costs``: grouped ``by``
    ``team``, ``owner``, ``job``, ``cloud``, ``gpu``, ``capacity`` or
    ``day``, since ``since`` (``30d``, ``12h`` or a UTC date such as
    ``2026-11-01``), with the cost per completed job and the saving against
    on-demand."""
    return _native.costs(by=by, since=since, **_where(provider, config, settings))


def reconcile(
    *,
    yes: bool = False,
    any_owner: bool = False,
    provider: Provider = "live",
    config: PathLike = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """The ledger made to agree with the clouds, as ``gpufleet reconcile``:
    the ends they caused, the managed instances the ledger does not know
    (adopted), launches left with nothing alive (failed). Carried out with
    ``yes`` (``applied``), else only said."""
    return _native.reconcile(yes=yes, any_owner=any_owner, **_where(provider, config, settings))
