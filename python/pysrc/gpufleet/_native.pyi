from typing import Any, Callable, Dict, List, Optional, Union

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
    provider: Optional[Union[str, FakeCloud]] = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def job_file_words(path: str) -> Dict[str, Any]: ...
def place_file(
    path: str,
    *,
    limit: int = ...,
    provider: Optional[Union[str, FakeCloud]] = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
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
def mix(
    profile: str,
    *,
    region: str,
    gpu: Optional[str] = ...,
    instance_type: Optional[str] = ...,
    cloud: Optional[str] = ...,
    interruptible_share: Optional[str] = ...,
    discount_1y: Optional[str] = ...,
    discount_3y: Optional[str] = ...,
    on_demand_price: Optional[str] = ...,
    spot_price: Optional[str] = ...,
) -> Dict[str, Any]: ...
def simulate(
    traces: str,
    *,
    pools: Optional[str] = ...,
    instance_type: Optional[List[str]] = ...,
    zone: Optional[str] = ...,
    job_hours: float = ...,
    deadline_hours: float = ...,
    changeover_hours: float = ...,
    starts: int = ...,
    policies: Optional[List[str]] = ...,
) -> Dict[str, Any]: ...

class FakeCloud:
    """The fake clouds of the conformance suite, in this process, on a fake
    clock that a managed job's waits move; jobs run on it are recorded in
    its own ledger (in memory)."""

    def __init__(self, clouds: Optional[List[str]] = ..., *, start: Optional[str] = ...) -> None: ...
    @property
    def now(self) -> str: ...
    @property
    def clouds(self) -> List[str]: ...
    def advance(self, duration: str) -> None: ...
    def set_out_of_capacity(self, pool: str, out: bool = ...) -> None: ...
    def set_capacity_limit(self, pool: str, limit: Optional[int]) -> None: ...
    def set_price(self, pool: str, usd_per_hour: str) -> None: ...
    def set_latency(self, operation: str, duration: str, *, cloud: Optional[str] = ...) -> None: ...
    def fail_next(
        self, operation: str, kind: str, *, cloud: Optional[str] = ..., message: Optional[str] = ...
    ) -> None: ...
    def instances(self) -> List[Dict[str, Any]]: ...
    def preempt(self, instance_id: str) -> None: ...
    def notice(self, instance_id: str, lead: str = ...) -> None: ...
    def billed(self) -> str: ...
    def call_count(self, operation: str) -> int: ...

def run(
    *,
    path: Optional[str] = ...,
    doc: Optional[str] = ...,
    provider: Union[str, FakeCloud],
    id: Optional[str] = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
    script: Optional[List[str]] = ...,
    on_event: Optional[Callable[[Dict[str, Any]], None]] = ...,
) -> Dict[str, Any]: ...
def jobs_ls(
    *,
    provider: Union[str, FakeCloud],
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def jobs_show(
    id: str,
    *,
    provider: Union[str, FakeCloud],
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def jobs_cancel(
    id: str,
    *,
    provider: Union[str, FakeCloud],
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
    any_owner: bool = ...,
) -> Dict[str, Any]: ...
def check(
    *,
    provider: Union[str, FakeCloud],
    clouds: Optional[List[str]] = ...,
    timeout: str = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> List[Dict[str, Any]]: ...
def launch(
    *,
    provider: Union[str, FakeCloud],
    path: Optional[str] = ...,
    doc: Optional[str] = ...,
    pool: Optional[str] = ...,
    name: Optional[str] = ...,
    key: Optional[str] = ...,
    image: Optional[str] = ...,
    count: int = ...,
    placement_group: Optional[str] = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def ls(
    *,
    provider: Union[str, FakeCloud],
    job: Optional[str] = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def terminate(
    ids: Optional[List[str]] = ...,
    *,
    provider: Union[str, FakeCloud],
    job: Optional[str] = ...,
    tags: Optional[Dict[str, str]] = ...,
    any_owner: bool = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def reap(
    *,
    provider: Union[str, FakeCloud],
    idle: Optional[str] = ...,
    below: Optional[int] = ...,
    grace: str = ...,
    yes: bool = ...,
    any_owner: bool = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def costs(
    *,
    provider: Union[str, FakeCloud],
    by: str = ...,
    since: str = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def reconcile(
    *,
    provider: Union[str, FakeCloud],
    yes: bool = ...,
    any_owner: bool = ...,
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
def serve_ls(
    *,
    provider: Union[str, FakeCloud],
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> List[Dict[str, Any]]: ...
def serve_status(
    name: str,
    *,
    provider: Union[str, FakeCloud],
    config: Optional[str] = ...,
    settings: Optional[Dict[str, str]] = ...,
) -> Dict[str, Any]: ...
