"""The process-wide loader of an engine integration (``mmcache.vllm``, ``mmcache.sglang``):
built on first use from the ``DYN_MM_*``/``MMCACHE_*`` variables (with the integration's own
defaults under them), shared by every request, and built again in a forked child, which may
not use its parent's. Imports no engine."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Optional

from . import Loader, _native


class ProcessLoader:
    """One loader per process, and its views in the decode profiles the engine asks for."""

    def __init__(self, defaults: Mapping[str, str]) -> None:
        self._defaults = dict(defaults)
        self._lock = threading.Lock()
        self._pid: Optional[int] = None
        self._loader: Optional[Loader] = None
        self._profiles: dict[Any, Any] = {}

    def loader(self) -> Loader:
        """The process's loader (built now on first use)."""
        loader = self._loader
        if loader is not None and self._pid == os.getpid():
            return loader
        with self._lock:
            if self._loader is None or self._pid != os.getpid():
                environ = {name: value for name, value in os.environ.items()
                           if name.startswith(("DYN_MM_", "MMCACHE_"))}
                for name, value in self._defaults.items():
                    if not environ.get(name, "").strip():
                        environ[name] = value
                self._loader = Loader(environ=environ)
                self._profiles = {}
                self._pid = os.getpid()
            return self._loader

    def profiled(self, key: Any, make: Callable[[Loader], Any]) -> Any:
        """The loader's view for `key`, made by `make(loader)` on first use."""
        loader = self.loader()
        view = self._profiles.get(key)
        if view is None:
            view = self._profiles.setdefault(key, make(loader))
        return view


class MetricsCollector:
    """A prometheus_client collector of ``mmcache.metrics_text()``, read at each scrape (for an
    engine's ``/metrics``)."""

    def collect(self) -> Any:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            families = list(text_string_to_metric_families(_native.metrics_text()))
        except Exception:  # noqa: BLE001 -- the engine's own metrics must still be scraped
            logging.getLogger(__name__).exception("mmcache's metrics left out of this scrape")
            return
        yield from families

    def describe(self) -> list:
        return []  # families are known at scrape time only
