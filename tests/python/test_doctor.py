"""``python -m mmcache doctor``: the ``mmcache doctor`` checks from a Python worker's image,
run as a process with the worker's environment against the session's real cluster, as the
user of docs/deployment.md's ACL recipe (read out of the doc)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]


def recipe() -> tuple[str, str, list[str]]:
    """(user, password, rules) of the one ``ACL SETUSER`` line of docs/deployment.md."""
    lines = [l.strip() for l in (ROOT / "docs/deployment.md").read_text().splitlines()
             if l.strip().startswith("ACL SETUSER ")]
    assert len(lines) == 1, lines
    words = lines[0].split()[2:]
    user, rules = words[0], words[1:]
    password = next(r[1:] for r in rules if r.startswith(">"))
    return user, password, rules


def as_user(cluster, rules: list[str]) -> str:
    """The recipe's user with ``rules`` on every node; the URL a worker is given."""
    user, password, _ = recipe()
    for port in cluster.ports:
        redis.Redis(host="127.0.0.1", port=port).execute_command("ACL", "SETUSER", user, *rules)
    return f"redis://{user}:{password}@127.0.0.1:{cluster.ports[0]}"


def doctor(url: str | None, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_MM_", "MMCACHE_"))}
    if url is not None:
        env.update(DYN_MM_SHARED_IMAGE_CACHE_ENABLED="1", DYN_MM_SHARED_IMAGE_CACHE_URL=url)
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "mmcache", "doctor"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_recipe_user_passes_the_data_path(cluster):
    out = doctor(as_user(cluster, recipe()[2]))
    assert out.returncode == 0, out.stdout + out.stderr
    for space in ("dynamo:mm:image:*", "mmcache:emb:v1:*"):
        for step in ("write", "read", "lease", "release", "delete"):
            assert any(space in l and f" {step} (" in l and l.endswith(": ok")
                       for l in out.stdout.splitlines()), (space, step, out.stdout)
    assert recipe()[1] not in out.stdout
    assert "4800  in all" in out.stdout, out.stdout


def test_a_missing_command_is_named_with_its_exit_code(cluster):
    rules = [r for r in recipe()[2] if r != "+strlen"]
    out = doctor(as_user(cluster, rules))
    assert out.returncode == 14, out.stdout + out.stderr
    assert "DENIED: STRLEN denied (command)" in out.stdout, out.stdout


def test_usage_and_a_bad_setting_exit_2():
    out = doctor(None, DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS="-1")
    assert out.returncode == 2
    assert "DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS" in out.stderr
    bad = subprocess.run([sys.executable, "-m", "mmcache", "nonsense"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "mmcache", "doctor", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "  14  " in helped.stdout, helped.stdout


def test_an_engine_told_to_use_mmcache_that_cannot_is_a_problem():
    """Here vLLM is not installed (tests/engines checks the installed case)."""
    out = doctor(None, VLLM_MEDIA_CONNECTOR="mmcache")
    assert out.returncode == 16, out.stdout + out.stderr
    assert "  vLLM    not installed" in out.stdout and "problem: VLLM_MEDIA_CONNECTOR" in out.stdout
    assert doctor(None).returncode == 0
