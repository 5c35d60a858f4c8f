"""The Docker sandbox: engine client, offline image, containers and their cgroups."""

from .cgroups import Cgroup, cgroup_of_pid
from .container import Sandbox, open_sandbox
from .engine import DockerEngine, open_engine, probe_docker
from .image import DEFAULT_IMAGE, ensure_image
from .lifecycle import prune_stale
from .settings import SandboxConfig

__all__ = [
    "DEFAULT_IMAGE",
    "Cgroup",
    "DockerEngine",
    "Sandbox",
    "SandboxConfig",
    "cgroup_of_pid",
    "ensure_image",
    "open_engine",
    "open_sandbox",
    "probe_docker",
    "prune_stale",
]
