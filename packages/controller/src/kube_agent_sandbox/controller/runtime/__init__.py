"""A small controller runtime on asyncio, shaped after controller-runtime.

Generic: nothing in this package knows about Sandboxes or any other concrete API kind. What a
platform team needs to write its own controllers, or to run ours inside its own program, is
exported here, and it is the only way in: the project's controllers, the gateway and the tests
import ``from kube_agent_sandbox.controller.runtime import X`` (import-linter checks the
sources); the submodules hold the implementation and may change between releases.

- building a process: `Manager`, `ControllerBuilder` (or `Controller` directly), `Informer`,
  `EventHandler`, `ControllerHandle` (what a custom watch handler may use), `WorkQueue`, rate
  limiters, `RuntimeMetrics`;
- the reconciler contract: `Reconciler`, `Request`, `Result`, `TerminalError`,
  `TransientError`; the error model of a pass: `ReconcileError`, `ErrorCollector`, `wrap`,
  `is_transient` (one status table, `TRANSIENT_STATUSES`), `classify`;
- talking to the API server: `Client` (writes) and `Reader` (informer caches), `ApiError`,
  `ApiClient`, `ClusterConfig`, `load_config`, `create_merge_patch`, and the children helpers
  `create_or_fetch` and `delete_child`;
- reading objects: `meta`, `name_of`, `namespace_of`, `uid_of`, `is_terminating`, ...;
  ownership (`controller_ref`, `check_ownership`, `set_controller_reference`, ...);
  conditions (`set_status_condition`, `find_condition`, ...); `semantic_equal`;
- filtering and mapping events: `Predicate` (e.g. `generation_changed`), `Mapper`;
- `EventRecorder`, `Expectations`, `LeaderElectionConfig`, `Runnable`;
- unit tests without a cluster: `FakeApi` (an in-memory API server) and `FakeReader`.

Objects are plain JSON dicts (`Obj`) as the API server sends them, and resources are named by
`Resource`: there are no generated model classes on the hot paths.
"""

from kube_agent_sandbox.controller.runtime.builder import (
    ControllerBuilder,
    ControllerHandle,
    HandlerFactory,
    RequestQueue,
)
from kube_agent_sandbox.controller.runtime.children import (
    create_or_fetch,
    delete_child,
)
from kube_agent_sandbox.controller.runtime.client import (
    ApiClient,
    error_from_status,
    parse_watch_line,
)
from kube_agent_sandbox.controller.runtime.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    find_condition,
    format_time,
    is_condition_true,
    new_condition,
    remove_status_condition,
    set_status_condition,
)
from kube_agent_sandbox.controller.runtime.config import (
    ClusterConfig,
    ConfigError,
    load_config,
    load_kubeconfig,
)
from kube_agent_sandbox.controller.runtime.controller import (
    Controller,
)
from kube_agent_sandbox.controller.runtime.errors import (
    RECONCILER_ERROR_REASON,
    TRANSIENT_STATUSES,
    ErrorClass,
    ErrorCollector,
    ReconcileError,
    StepOutcome,
    classify,
    describe,
    is_transient,
    join_messages,
    transient_status,
    wrap,
)
from kube_agent_sandbox.controller.runtime.events import (
    EventSink,
    truncate_note,
)
from kube_agent_sandbox.controller.runtime.expectations import (
    Expectations,
)
from kube_agent_sandbox.controller.runtime.fake import (
    Call,
    FakeApi,
    FakeReader,
)
from kube_agent_sandbox.controller.runtime.informer import (
    OWNER_UID_INDEX,
    EventHandler,
    Informer,
    Transform,
)
from kube_agent_sandbox.controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
)
from kube_agent_sandbox.controller.runtime.manager import (
    CacheSyncTimeout,
    Manager,
)
from kube_agent_sandbox.controller.runtime.mergepatch import (
    apply_merge_patch,
    create_merge_patch,
)
from kube_agent_sandbox.controller.runtime.metrics import (
    RuntimeMetrics,
    default_metrics,
)
from kube_agent_sandbox.controller.runtime.objects import (
    group_of,
    is_terminating,
    labels_match,
    meta,
    name_of,
    namespace_of,
    request_of,
    resource_version_of,
    uid_of,
)
from kube_agent_sandbox.controller.runtime.ownership import (
    Ownership,
    check_ownership,
    controller_ref,
    controller_reference,
    is_controlled_by,
    is_owned_by,
    quote,
    set_controller_reference,
)
from kube_agent_sandbox.controller.runtime.predicates import (
    generation_changed,
)
from kube_agent_sandbox.controller.runtime.ratelimit import (
    ItemExponentialBackoff,
    RateLimiter,
    default_controller_rate_limiter,
)
from kube_agent_sandbox.controller.runtime.semantic import (
    is_empty,
    parse_quantity,
    quantities_equal,
    semantic_equal,
)
from kube_agent_sandbox.controller.runtime.servers import (
    BindAddress,
    HttpHandler,
    HttpRequest,
    HttpResponse,
    parse_bind_address,
)
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Client,
    EventRecorder,
    ListWatcher,
    Mapper,
    Obj,
    Predicate,
    Reader,
    Reconciler,
    Request,
    Resource,
    Result,
    Runnable,
    TerminalError,
    TransientError,
    WatchEvent,
)
from kube_agent_sandbox.controller.runtime.workqueue import (
    QueueShutDown,
    WorkQueue,
)

__all__ = [
    "FALSE",
    "OWNER_UID_INDEX",
    "RECONCILER_ERROR_REASON",
    "TRANSIENT_STATUSES",
    "TRUE",
    "UNKNOWN",
    "ApiClient",
    "ApiError",
    "BindAddress",
    "CacheSyncTimeout",
    "Call",
    "Client",
    "ClusterConfig",
    "ConfigError",
    "Controller",
    "ControllerBuilder",
    "ControllerHandle",
    "ErrorClass",
    "ErrorCollector",
    "EventHandler",
    "EventRecorder",
    "EventSink",
    "Expectations",
    "FakeApi",
    "FakeReader",
    "HandlerFactory",
    "HttpHandler",
    "HttpRequest",
    "HttpResponse",
    "Informer",
    "ItemExponentialBackoff",
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "ListWatcher",
    "Manager",
    "Mapper",
    "Obj",
    "Ownership",
    "Predicate",
    "QueueShutDown",
    "RateLimiter",
    "Reader",
    "ReconcileError",
    "Reconciler",
    "Request",
    "RequestQueue",
    "Resource",
    "Result",
    "Runnable",
    "RuntimeMetrics",
    "StepOutcome",
    "TerminalError",
    "Transform",
    "TransientError",
    "WatchEvent",
    "WorkQueue",
    "apply_merge_patch",
    "check_ownership",
    "classify",
    "controller_ref",
    "controller_reference",
    "create_merge_patch",
    "create_or_fetch",
    "default_controller_rate_limiter",
    "default_metrics",
    "delete_child",
    "describe",
    "error_from_status",
    "find_condition",
    "format_time",
    "generation_changed",
    "group_of",
    "is_condition_true",
    "is_controlled_by",
    "is_empty",
    "is_owned_by",
    "is_terminating",
    "is_transient",
    "join_messages",
    "labels_match",
    "load_config",
    "load_kubeconfig",
    "meta",
    "name_of",
    "namespace_of",
    "new_condition",
    "parse_bind_address",
    "parse_quantity",
    "parse_watch_line",
    "quantities_equal",
    "quote",
    "remove_status_condition",
    "request_of",
    "resource_version_of",
    "semantic_equal",
    "set_controller_reference",
    "set_status_condition",
    "transient_status",
    "truncate_note",
    "uid_of",
    "wrap",
]
