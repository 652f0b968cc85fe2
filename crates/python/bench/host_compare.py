"""Decode once per host: the host pixel tier, measured with real worker processes.

Two parts, each implementation in processes of its own (worker.py), at asyncio concurrency 16:

* ``fleet``: 4 processes of one host run a Zipf trace (s = 1.1) over 2000 distinct 256 px JPEGs
  (no two URLs with the same bytes: servers.py gives each URL's copy a comment of its own),
  with the default settings and the Python package's default layout (4 bytes a pixel), sharing
  one disk tier, with and without the host pixel tier. Reported: decodes per distinct image
  (every process's ``mmcache_decode_duration_seconds`` count, summed, over the images the
  fleet loaded), and the growth of the processes' summed PSS (``/proc/PID/smaps_rollup``, read
  after each process built its loader and after the trace) against the host tier's bytes.
* ``host hit``: a 2048 px JPEG through ``mmcache.dynamo.ImageLoader`` (PIL images) with the
  decoded cache off (``DYN_MM_IMAGE_CACHE_SIZE=0``), so every load is a hit of the tier under
  test: the host pixel tier (a mapping and its checksum) against the disk tier (a read and a
  decode), and against Dynamo's own ImageLoader on a shared-cache hit (a GET and a decode),
  loads/s.

Writes the rows (docs/bench-results.json's form) to ``--out``; ``cargo xtask bench --scenario
host`` runs it in target/venv-bench.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dynamo_compare
import servers
import worker
from dynamo_compare import Worker, summarize, write_out

REPO = Path(__file__).resolve().parents[3]
FLEET_PROCESSES = 4
FLEET_IMAGES = 2000
ZIPF_S = 1.1
# The goals of issue 36.
GOAL_DECODES_PER_IMAGE = 1.05
GOAL_PSS_OVER_TIER = 1.2
GOAL_HOST_OVER_DISK = 10.0
GOAL_HOST_OVER_DYNAMO = 10.0
HIT_URLS = 32
# The image classes this benchmark serves (servers.py makes their base images).
CLASSES = {"jpeg256": ("jpg", 256), "jpeg2048": servers.CLASSES["jpeg2048"]}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter traces, one measured round")
    p.add_argument("--out", type=Path, default=REPO / "target" / "bench" / "host.json")
    p.add_argument("--verbose", action="store_true", help="keep the loaders' log output")
    a = p.parse_args()
    a.trace_loads = 1500 if a.quick else 4000
    a.rounds = 1 if a.quick else 3
    a.recorded = (f"{time.strftime('%Y-%m-%d %H:%M')}, host_compare.py"
                  f"{' --quick' if a.quick else ''}, {os.cpu_count()} CPUs, "
                  f"{platform.platform()}")
    return a


def memory_dir(name: str) -> str:
    """A fresh folder on a memory file system (`/dev/shm`), else in the temporary folder."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return tempfile.mkdtemp(prefix=f"mmcache-bench-{name}-", dir=base)


def pss(pid: int) -> int:
    """The process's proportional set size in bytes."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss line for {pid}")


def tier_bytes(directory: str) -> int:
    """The bytes of the tier's entries (not its locks or temporary files)."""
    total = 0
    v1 = os.path.join(directory, "v1")
    for shard in os.listdir(v1) if os.path.isdir(v1) else []:
        if len(shard) != 2:
            continue
        for name in os.listdir(os.path.join(v1, shard)):
            total += os.stat(os.path.join(v1, shard, name)).st_size
    return total


def zipf_trace(rng: np.random.Generator, n: int, images: int) -> np.ndarray:
    """`n` image indices drawn from a Zipf law of exponent ZIPF_S over `images` ranks."""
    weights = 1.0 / np.arange(1, images + 1) ** ZIPF_S
    return rng.choice(images, size=n, p=weights / weights.sum())


def fleet(args, origin) -> list[dict]:
    """The fleet part: rows for decodes per image and PSS, with and without the host tier."""
    side = CLASSES["jpeg256"][1]
    traces = [zipf_trace(np.random.default_rng(7 + w), args.trace_loads, FLEET_IMAGES)
              for w in range(FLEET_PROCESSES)]
    distinct = len(set(np.concatenate(traces).tolist()))
    results = {}
    for with_host in (True, False):
        disk = memory_dir("disk")
        host = memory_dir("host")
        env = {"DYN_MM_ALLOW_INTERNAL": "1", "MMCACHE_DISK_CACHE_DIR": disk}
        if with_host:
            env["MMCACHE_HOST_PIXELS_DIR"] = host
        # A fresh set of URLs per configuration: the origin's bytes, never a cache of the other.
        tag = "host" if with_host else "disk"
        url = lambda i, tag=tag: [  # noqa: E731
            f"{origin.base}/jpeg256/fleet-{tag}/{i}.jpg", [side, side]]
        workers = [Worker("mmcache-numpy", env, args.verbose) for _ in range(FLEET_PROCESSES)]
        try:
            ids = [w.build([url(FLEET_IMAGES + k)]) for k, w in enumerate(workers)]
            before = [pss(w.proc.pid) for w in workers]
            requests = origin.requests()
            started = time.perf_counter()
            for w, i, trace in zip(workers, ids, traces):
                w.conn.send({"op": "pass", "id": i, "urls": [url(int(t)) for t in trace]})
            passes = [w.wait(1800) for w in workers]
            wall = time.perf_counter() - started
            after = [pss(w.proc.pid) for w in workers]
            stats = [w.call(op="stats") for w in workers]
        finally:
            for w in workers:
                w.close()
        # Each worker decoded its own warm-up image once, outside the trace.
        decodes = sum(s["decodes"] for s in stats) - FLEET_PROCESSES
        results[with_host] = {
            "decodes": decodes,
            "per_image": decodes / distinct,
            "pss_growth": sum(after) - sum(before),
            "tier_bytes": tier_bytes(host) if with_host else 0,
            "failed": sum(p["failed"] for p in passes),
            "loads_per_s": sum(p["loads"] for p in passes) / wall,
            "origin_requests": origin.requests() - requests,
        }
        r = results[with_host]
        print(f"  fleet {'host+disk' if with_host else 'disk only'}: {decodes} decodes for "
              f"{distinct} images ({r['per_image']:.3f} each), PSS +{r['pss_growth'] >> 20} MiB, "
              f"host tier {r['tier_bytes'] >> 20} MiB, {r['loads_per_s']:.0f} loads/s, "
              f"{r['failed']} failed", file=sys.stderr, flush=True)
        shutil.rmtree(disk, ignore_errors=True)
        shutil.rmtree(host, ignore_errors=True)
    on, off = results[True], results[False]
    note = (f"{FLEET_PROCESSES} processes, Zipf s={ZIPF_S} over {FLEET_IMAGES} distinct 256 px "
            f"JPEGs, {args.trace_loads} loads each ({distinct} distinct loaded); decodes: "
            f"{on['decodes']} with the host tier, {off['decodes']} with the disk tier alone; "
            f"origin GETs {on['origin_requests']} and {off['origin_requests']}; "
            f"failed {on['failed'] + off['failed']}")
    pss_ratio = on["pss_growth"] / on["tier_bytes"] if on["tier_bytes"] else None
    return [
        {
            "scenario": "host pixels: decodes per distinct image, 4 processes (Zipf)",
            "subject": {"ops_per_s": round(on["loads_per_s"], 1)},
            "baseline_name": "the same 4 processes with the disk tier alone",
            "baseline": {"ops_per_s": round(off["loads_per_s"], 1)},
            "ratio_kind": "decodes/image",
            "ratio": round(on["per_image"], 3),
            "target": f"<= {GOAL_DECODES_PER_IMAGE} (disk tier alone: {off['per_image']:.2f})",
            "met": on["per_image"] <= GOAL_DECODES_PER_IMAGE and on["failed"] == 0,
            "note": note,
        },
        {
            "scenario": "host pixels: summed PSS growth over the host tier's bytes, 4 processes",
            "subject": {"ops_per_s": round(on["loads_per_s"], 1)},
            "baseline_name": "the same 4 processes with the disk tier alone",
            "baseline": {"ops_per_s": round(off["loads_per_s"], 1)},
            "ratio_kind": "x tier bytes",
            "ratio": None if pss_ratio is None else round(pss_ratio, 3),
            "target": f"< {GOAL_PSS_OVER_TIER}",
            "met": pss_ratio is not None and pss_ratio < GOAL_PSS_OVER_TIER,
            "note": (f"PSS +{on['pss_growth'] / 2**20:.0f} MiB with the host tier holding "
                     f"{on['tier_bytes'] / 2**20:.0f} MiB; +{off['pss_growth'] / 2**20:.0f} MiB "
                     f"with the disk tier alone ({off['pss_growth'] / max(on['tier_bytes'], 1):.2f}x "
                     f"those bytes)"),
        },
    ]


def hits(args, origin, cluster) -> list[dict]:
    """The host-hit part: loads/s of a host hit, a disk hit and Dynamo's shared hit."""
    side = CLASSES["jpeg2048"][1]
    urls = [[f"{origin.base}/jpeg2048/hits/{i}.jpg", [side, side]] for i in range(HIT_URLS)]
    host, disk = memory_dir("hit-host"), tempfile.mkdtemp(prefix="mmcache-bench-hit-disk-")
    base = {"DYN_MM_ALLOW_INTERNAL": "1"}
    # One process fills both tiers (the host tier's pixels, the disk tier's bytes).
    filler = Worker("mmcache", {**base, "MMCACHE_HOST_PIXELS_DIR": host,
                                "MMCACHE_DISK_CACHE_DIR": disk}, args.verbose)
    try:
        filler.call(op="pass", id=filler.build([]), urls=urls)
    finally:
        filler.close()
    writer = cluster.client()
    try:
        for url, _ in urls:
            writer.set(dynamo_compare.shared_key(url),
                       servers.body_for(dynamo_compare_bases(), url[len(origin.base):]), ex=3600)
    finally:
        writer.close()
    off = {"DYN_MM_IMAGE_CACHE_SIZE": "0"}
    impls = {
        "host": Worker("mmcache", {**base, **off, "MMCACHE_HOST_PIXELS_DIR": host},
                       args.verbose),
        "disk": Worker("mmcache", {**base, **off, "MMCACHE_DISK_CACHE_DIR": disk}, args.verbose),
        "dynamo": Worker("dynamo", {**base, "DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1",
                                    "DYN_MM_SHARED_IMAGE_CACHE_URL": cluster.url}, args.verbose),
    }
    rounds: dict[str, list[dict]] = {name: [] for name in impls}
    try:
        for rnd in range(args.rounds + 1):
            for name, w in impls.items():
                # A new loader a round (Dynamo's memory cache empty: every load a shared hit);
                # the host tier's loads repeat the URLs, each load a hit of its own.
                loader = w.build([])
                repeat = 4 if name == "host" else 1
                result = w.call(op="pass", id=loader, urls=urls * repeat)
                w.call(op="drop", id=loader)
                if rnd > 0:
                    result["origin_requests"] = 0
                    rounds[name].append(result)
                    print(f"  hit {name:7} {result['loads'] / result['wall_s']:8.1f} loads/s "
                          f"p50 {result['p50_ms']:7.2f} ms failed {result['failed']}",
                          file=sys.stderr, flush=True)
    finally:
        for w in impls.values():
            w.close()
        shutil.rmtree(host, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
    s = {name: summarize(r) for name, r in rounds.items()}
    rows = []
    for baseline, label, goal in (
        ("disk", "mmcache's disk tier hit (a read and a decode)", GOAL_HOST_OVER_DISK),
        ("dynamo", "Dynamo's ImageLoader shared hit (ai-dynamo 1.6.1)", GOAL_HOST_OVER_DYNAMO),
    ):
        h, b = s["host"], s[baseline]
        ratio = h["loads_per_s"] / b["loads_per_s"] if b["loads_per_s"] else None
        failed = h["failed"] + b["failed"]
        # A baseline that failed loads gives no verdict (as the other comparisons judge it);
        # a host-tier load that failed is a miss of the goal.
        target = f">= {goal:g}x"
        met = ratio is not None and ratio >= goal and h["failed"] == 0
        if b["failed"]:
            target = f"{goal:g}x (no verdict: {baseline} failed {b['failed']} loads)"
            met = None
        rows.append({
            "scenario": f"python: host pixel hit, JPEG 2048 px (PIL images), vs {baseline}",
            "subject": {"ops_per_s": round(h["loads_per_s"], 1), "p50_ms": round(h["p50_ms"], 3),
                        "p99_ms": round(h["p99_ms"], 3)},
            "baseline_name": label,
            "baseline": {"ops_per_s": round(b["loads_per_s"], 1),
                         "p99_ms": round(b["p99_ms"], 3)},
            "ratio_kind": "x loads/s",
            "ratio": None if ratio is None else round(ratio, 3),
            "target": target,
            "met": met,
            "note": (f"decoded cache off (DYN_MM_IMAGE_CACHE_SIZE=0): every load a hit of the "
                     f"tier; CPU per load {h['cpu_ms_per_load']:.2f} ms "
                     f"({baseline} {b['cpu_ms_per_load']:.2f} ms); failed {failed}"),
        })
    return rows


_BASES: dict | None = None


def dynamo_compare_bases() -> dict:
    global _BASES
    if _BASES is None:
        _BASES = servers.make_bases(CLASSES)
    return _BASES


def main() -> int:
    args = parse_args()
    t0 = time.monotonic()
    print("generating images ...", file=sys.stderr, flush=True)
    bases = dynamo_compare_bases()
    origin = cluster = None
    try:
        origin = servers.Origin(bases)
        cluster = servers.Cluster()
        rows = fleet(args, origin) + hits(args, origin, cluster)
    finally:
        if cluster is not None:
            cluster.close()
        if origin is not None:
            origin.close()
    for r in rows:
        verdict = {True: "yes", False: "no", None: "-"}[r["met"]]
        print(f"| {r['scenario']} | {r['ratio']} {r['ratio_kind']} | {r['target']} | {verdict} |")
    out = {
        "benchmark": "the host pixel tier: decodes per image, PSS, host hits",
        "recorded": args.recorded,
        "concurrency": worker.CONCURRENCY,
        "quick": args.quick,
        "rounds": args.rounds,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "rows": rows,
        "all_targets_met": all(r["met"] is not False for r in rows),
    }
    write_out(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
