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
disk tier, and the most memory the budgets allow. A start-up check, not a probe.
"""


def main(argv: list[str]) -> int:
    from . import _native
    from .errors import ConfigError

    if argv[:1] != ["doctor"] or len(argv) > 2 or argv[1:] not in ([], ["--help"], ["-h"]):
        sys.stderr.write(USAGE)
        return 2
    if argv[1:]:
        sys.stdout.write(USAGE + "\n" + _native.doctor_exit_codes() + "\n")
        return 0
    try:
        text, code = _native.doctor()
    except ConfigError as e:
        sys.stderr.write(f"mmcache: {e}\n")
        return 2
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
