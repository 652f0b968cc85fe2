"""``python -m mmcache doctor``: the checks of the ``mmcache doctor`` command, from a Python
worker's image (the same code, in the native module), with the worker's ``DYN_MM_*`` /
``MMCACHE_*`` environment. A start-up check, not a probe (docs/deployment.md). Exits with the
code of the first problem found (``python -m mmcache doctor --help`` lists them); 2 for bad
usage or a bad setting.
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m mmcache doctor

Checks the setup of a worker with this environment: the configuration, the JPEG decoder, the
shared cache and its data path as a worker runs it (on keys of its own, deleted after), the
disk tier, and the most memory the budgets allow. A start-up check, not a probe. Then whether
vLLM and SGLang, where installed, will load mmcache's plugins (neither is imported).
"""

#: Exit code when an engine is told to use mmcache (VLLM_MEDIA_CONNECTOR=mmcache) and will not.
ENGINE_EXIT = 16


def main(argv: list[str]) -> int:
    from . import _native
    from .errors import ConfigError

    if argv[:1] != ["doctor"] or len(argv) > 2 or argv[1:] not in ([], ["--help"], ["-h"]):
        sys.stderr.write(USAGE)
        return 2
    if argv[1:]:
        codes = _native.doctor_exit_codes().rstrip("\n")
        sys.stdout.write(f"{USAGE}\n{codes}\n  {ENGINE_EXIT}  an engine set to use mmcache "
                         "will not find it (see the engines section)\n")
        return 0
    try:
        text, code = _native.doctor()
    except ConfigError as e:
        sys.stderr.write(f"mmcache: {e}\n")
        return 2
    report, problem = engines_report()
    sys.stdout.write(text + report)
    sys.stdout.flush()
    return code or (ENGINE_EXIT if problem else 0)


def _plugin_state(group: str, target: str, allow_var: str) -> tuple[bool, str]:
    """Whether an engine loading the entry points of `group` (filtered by the variable
    `allow_var`) will run mmcache's `target`, and why."""
    import os
    from importlib.metadata import entry_points

    ours = [ep for ep in entry_points(group=group) if ep.name == "mmcache"]
    if not ours:
        return False, f"no `mmcache` entry point in {group} (reinstall the mmcache wheel)"
    if ours[0].value != target:
        return False, f"the `mmcache` entry point of {group} is {ours[0].value}, not {target}"
    allowed = os.environ.get(allow_var)
    if allowed and "mmcache" not in {x.strip() for x in allowed.split(",")}:
        return False, f"{allow_var}={allowed} leaves the `mmcache` plugin out"
    return True, f"the `mmcache` plugin ({target}) is loaded"


def engines_report() -> tuple[str, bool]:
    """The engines section: for vLLM and SGLang, installed or not, and whether they will load
    mmcache's plugins; whether that is a problem (an engine told to use mmcache that will not)."""
    import importlib.util
    import os

    lines = ["\nengines"]
    problem = False
    connector = os.environ.get("VLLM_MEDIA_CONNECTOR", "http")
    vllm = importlib.util.find_spec("vllm") is not None
    loads, why = _plugin_state("vllm.general_plugins", "mmcache.vllm:register", "VLLM_PLUGINS")
    if not vllm:
        lines.append("  vLLM    not installed")
        problem |= connector == "mmcache"
    elif not loads:
        lines.append(f"  vLLM    will not find the mmcache connector: {why}")
        problem |= connector == "mmcache"
    elif connector != "mmcache":
        lines.append(f"  vLLM    {why}; not selected (VLLM_MEDIA_CONNECTOR={connector}): set "
                     "VLLM_MEDIA_CONNECTOR=mmcache to load images through mmcache")
    else:
        lines.append(f"  vLLM    uses the mmcache connector: {why}, VLLM_MEDIA_CONNECTOR=mmcache")
    sglang = importlib.util.find_spec("sglang") is not None
    loads, why = _plugin_state("sglang.srt.plugins", "mmcache.sglang:register", "SGLANG_PLUGINS")
    if not sglang:
        lines.append("  SGLang  not installed")
    elif loads:
        lines.append(f"  SGLang  loads images through mmcache: {why}")
    else:
        lines.append(f"  SGLang  will not load images through mmcache: {why}")
    if problem:
        lines.append("  problem: VLLM_MEDIA_CONNECTOR=mmcache, and vLLM will not find the "
                     "connector")
    return "\n".join(lines) + "\n", problem


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
