from typing import Any, Dict, List, Optional

__version__: str

class Error(Exception):
    kind: str
    cloud: Optional[str]
    operation: Optional[str]
    message: str

class NotFound(Error): ...
class AlreadyExists(Error): ...
class InsufficientCapacity(Error): ...
class QuotaExceeded(Error): ...
class RateLimited(Error): ...
class Unauthenticated(Error): ...
class PermissionDenied(Error): ...
class InvalidInput(Error): ...
class Unsupported(Error): ...
class Timeout(Error): ...
class Unavailable(Error): ...
class Conflict(Error): ...
class Unexpected(Error): ...

def offers(
    *,
    gpu: Optional[List[str]] = ...,
    capacity: Optional[str] = ...,
    cloud: Optional[List[str]] = ...,
    region: Optional[List[str]] = ...,
    sort: str = ...,
    limit: int = ...,
) -> List[Dict[str, Any]]: ...
def place(
    *,
    gpu: List[str],
    hours: float,
    deadline: Optional[str] = ...,
    budget: Optional[str] = ...,
    cloud: Optional[List[str]] = ...,
    region: Optional[List[str]] = ...,
    checkpoint_interval: str = ...,
    checkpoint_cost: str = ...,
    restart_overhead: str = ...,
    not_interruptible: bool = ...,
    limit: int = ...,
    name: str = ...,
) -> Dict[str, Any]: ...
def place_file(path: str, *, limit: int = ...) -> Dict[str, Any]: ...
def fit(
    *,
    params: Optional[str] = ...,
    model: Optional[str] = ...,
    precision: str = ...,
    training: Optional[str] = ...,
    context: Optional[int] = ...,
    batch: int = ...,
    layers: Optional[int] = ...,
    kv_heads: Optional[int] = ...,
    head_dim: Optional[int] = ...,
    hidden: Optional[int] = ...,
    activation_checkpointing: bool = ...,
    cloud: Optional[List[str]] = ...,
    region: Optional[List[str]] = ...,
    gpu: Optional[List[str]] = ...,
    max_nodes: Optional[int] = ...,
    limit: int = ...,
) -> Dict[str, Any]: ...
