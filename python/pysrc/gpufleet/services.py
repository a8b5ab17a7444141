"""Inference services in the ledger, as ``gpufleet serve ls`` and ``serve
status`` show them: :func:`ls` and :func:`status` (the documents those print
with ``-o json``). A service is served by ``gpufleet serve``; these read
what its controller keeps in the ledger.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Union

from . import Provider, _native
from .jobs import _where

__all__ = ["ls", "status"]


def ls(
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> List[Dict[str, Any]]:
    """Every service in the ledger: its state, version, target, ready
    replicas (spot and on-demand), cost an hour and controller."""
    return _native.serve_ls(**_where(provider, config, settings))


def status(
    name: str,
    *,
    provider: Provider = "live",
    config: Union[None, str, "os.PathLike[str]"] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Service ``name``'s status as its controller last wrote it (replicas,
    scale decisions, rollouts), where it stands, and its log
    (``history``); an unknown name raises :class:`gpufleet.NotFound`."""
    return _native.serve_status(name, **_where(provider, config, settings))
