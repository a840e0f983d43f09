"""A small controller runtime on asyncio, shaped after controller-runtime.

Generic: nothing in this package knows about Sandboxes or any other concrete API kind. What a
platform team needs to write its own controllers, or to run ours inside its own program, is
exported here; the submodules hold the implementation and may change between releases.

- building a process: `Manager`, `ControllerBuilder` (or `Controller` directly);
- the reconciler contract: `Reconciler`, `Request`, `Result`, `TerminalError`;
- talking to the API server: `Client` (writes) and `Reader` (informer caches), `ApiError`,
  `ApiClient`, `ClusterConfig`, `load_config`, `create_merge_patch`;
- filtering and mapping events: `Predicate`, `Mapper`;
- `EventRecorder`, `Expectations`, `LeaderElectionConfig`, `Runnable`;
- unit tests without a cluster: `FakeApi` (an in-memory API server) and `FakeReader`.

Objects are plain JSON dicts (`Obj`) as the API server sends them, and resources are named by
`Resource`: there are no generated model classes on the hot paths.
"""

from kube_agent_sandbox.controller.runtime.builder import ControllerBuilder
from kube_agent_sandbox.controller.runtime.client import ApiClient
from kube_agent_sandbox.controller.runtime.config import ClusterConfig, load_config
from kube_agent_sandbox.controller.runtime.controller import Controller
from kube_agent_sandbox.controller.runtime.expectations import Expectations
from kube_agent_sandbox.controller.runtime.fake import FakeApi, FakeReader
from kube_agent_sandbox.controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
)
from kube_agent_sandbox.controller.runtime.manager import CacheSyncTimeout, Manager
from kube_agent_sandbox.controller.runtime.mergepatch import create_merge_patch
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Client,
    EventRecorder,
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
)

__all__ = [
    "ApiClient",
    "ApiError",
    "CacheSyncTimeout",
    "Client",
    "ClusterConfig",
    "Controller",
    "ControllerBuilder",
    "EventRecorder",
    "Expectations",
    "FakeApi",
    "FakeReader",
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "Manager",
    "Mapper",
    "Obj",
    "Predicate",
    "Reader",
    "Reconciler",
    "Request",
    "Resource",
    "Result",
    "Runnable",
    "TerminalError",
    "create_merge_patch",
    "load_config",
]
