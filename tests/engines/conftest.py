"""The engines' tests (run in target/venv-engines, where the real vLLM and SGLang are) use the
real servers of tests/python/conftest.py: the HTTP origin and the Redis Cluster."""

import importlib.util
import os
import pathlib
import sys

# vLLM infers its platform once per process; without a GPU (and not being its CPU build) it
# needs to be told, or parsing its CLI arguments fails.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

_spec = importlib.util.spec_from_file_location(
    "mmcache_test_servers", pathlib.Path(__file__).parent.parent / "python" / "conftest.py"
)
servers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = servers  # dataclasses look their module up there
_spec.loader.exec_module(servers)

# pytest finds fixtures by name in this module.
origin = servers.origin
path = servers.path
cluster = servers.cluster
shared_env = servers.shared_env
_clean_env = servers._clean_env
Route = servers.Route
