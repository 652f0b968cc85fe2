#!/usr/bin/env python3
"""What a Dynamo worker gets: mmcache's drop-in, and its numpy API, against Dynamo's own
``ImageLoader``, each in a process of its own, on the same images, origin and cluster.

    target/venv-bench/bin/python crates/python/bench/dynamo_compare.py [--quick] [--rounds N]
        [--out PATH] [--no-faults] [--classes jpeg512,png1024]

``cargo xtask bench --scenario python`` runs it in target/venv-bench (Dynamo's wheel without
its dependencies, httpx, aiohttp, a release build of mmcache).

Implementations (worker.py): ``dynamo`` (ai-dynamo 1.6.1's ImageLoader, PIL images),
``mmcache`` (``mmcache.dynamo.ImageLoader``, PIL images), ``mmcache-numpy``
(``mmcache.Loader.load``, numpy arrays), all with their defaults. Each runs in its own process
(no shared GIL, allocator or cache), one at a time, at asyncio concurrency 16; in every round
each implementation runs once, the first alternating from round to round; one unmeasured round
first; the median round (by loads/s) is reported with its p50, p99, the process's CPU and the
event-loop thread's CPU per load. Background cache writes are flushed after each timed pass.

Images (servers.py): JPEG 512, 1024 and 2048 px (photo-like, q90) and PNG 1024 px, every URL
with bytes of its own. Scenarios, per image class:

* ``memory``: one loader per round, 8 URLs (Dynamo's default cache holds 8 images) loaded once,
  then loaded again and again: memory hits;
* ``shared``: entries written beforehand at Dynamo's keys by redis-py; a new loader per round,
  each URL once: shared-cache GET + decode;
* ``miss``: fresh URLs every round: origin fetch + decode + shared-cache SET.

Faults (JPEG 512 px, ``--no-faults`` skips them): ``hung``, every node SIGSTOPped under loaders
built before; ``outage``, every node killed. They must not fail a load.

Output: a Markdown table on stdout; JSON at ``--out`` whose ``rows`` are in the form of
docs/bench-results.json (``cargo xtask bench-docs --merge FILE`` records them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import servers
import worker

REPO = Path(__file__).resolve().parents[3]
IMPLS = ("mmcache", "dynamo", "mmcache-numpy")
# With --before DIR: the drop-in of an earlier build (DIR holds its `mmcache` package), so one
# run measures before and after on the same machine, images and cluster.
BEFORE = "mmcache-before"
# Loads of one timed pass: memory hits, and shared hits or misses by class (about a second or
# more of Dynamo's work each on 2 cores).
MEMORY_LOADS = 16_000
IO_LOADS = {"jpeg512": 800, "jpeg1024": 320, "jpeg2048": 96, "png1024": 160}
CACHE_SIZE = 8  # Dynamo's default ImageLoader cache_size
# mmcache (PIL) over Dynamo, loads/s: the goals of issue 27.
GOALS = {"memory": 1.0, "shared": 2.0, ("miss", "jpeg2048"): 1.5}
SCENARIO_TITLES = {"memory": "memory hit", "shared": "shared hit", "miss": "miss",
                   "hung": "hung cache (every node stopped)", "outage": "outage (nodes killed)"}


class Worker:
    """A worker process running one implementation."""

    def __init__(self, name: str, env: dict[str, str], verbose: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker.main, args=(name, child, env, verbose),
                                daemon=True)
        self.proc.start()
        hello = self.wait(120)
        self.versions = hello["versions"]
        self.ids = 0

    def wait(self, timeout: float) -> dict:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.name}: no answer in {timeout} s")
        reply = self.conn.recv()
        if not reply.get("ok"):
            raise RuntimeError(f"{self.name}: {reply.get('error')}")
        return reply

    def call(self, timeout: float = 600, **cmd) -> dict:
        self.conn.send(cmd)
        return self.wait(timeout)

    def build(self, warm: list) -> int:
        self.ids += 1
        self.call(op="build", id=self.ids, warm=warm)
        return self.ids

    def close(self) -> None:
        try:
            self.call(op="exit", timeout=30)
        except Exception:  # noqa: BLE001 - killed below anyway
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def before_env(args, name: str) -> dict[str, str]:
    """The earlier build's worker finds its package first on its path."""
    return {worker.BEFORE_PATH: str(args.before.resolve())} if name == BEFORE else {}


def shared_key(url: str) -> str:
    return f"dynamo:mm:image:{{{hashlib.sha256(url.encode()).hexdigest()}}}:bytes"


class Bench:
    def __init__(self, args, bases, origin, cluster, workers) -> None:
        self.args, self.bases, self.origin, self.cluster = args, bases, origin, cluster
        self.workers = workers
        self.rounds: dict[tuple[str, str, str], list[dict]] = {}

    def url(self, cls: str, tag: str, i: int) -> tuple[str, tuple[int, int]]:
        ext, side = servers.CLASSES[cls]
        return f"{self.origin.base}/{cls}/{tag}/{i}.{ext}", (side, side)

    def urls(self, cls: str, tag: str, n: int) -> list:
        return [self.url(cls, tag, i) for i in range(n)]

    def timed(self, scenario: str, cls: str, w: Worker, loader: int, urls: list) -> None:
        before = self.origin.requests()
        result = w.call(op="pass", id=loader, urls=urls)
        result["origin_requests"] = self.origin.requests() - before
        self.rounds.setdefault((scenario, cls, w.name), []).append(result)
        print(f"  {scenario:7} {cls:9} {w.name:13} {result['loads'] / result['wall_s']:9.1f} "
              f"loads/s  p50 {result['p50_ms']:7.2f} ms  p99 {result['p99_ms']:7.2f} ms  "
              f"loop {1000 * result['loop_cpu_s'] / result['loads']:.3f} ms/load  "
              f"failed {result['failed']}", file=sys.stderr, flush=True)

    def each_round(self, rounds: int):
        """(round, measured, workers in this round's order)."""
        for rnd in range(rounds + 1):
            order = list(self.workers) if rnd % 2 == 0 else list(reversed(self.workers))
            yield rnd, rnd > 0, order

    def image_class(self, cls: str) -> None:
        rounds, n = self.args.rounds, self.args.io_loads[cls]
        memory_loads = self.args.memory_loads
        for rnd, measured, order in self.each_round(rounds):
            for w in order:
                eight = self.urls(cls, f"memory-{w.name}-r{rnd}", CACHE_SIZE)
                loader = w.build(eight)
                urls = [eight[i % CACHE_SIZE] for i in range(memory_loads)]
                self.run(measured, "memory", cls, w, loader, urls)
        hits = self.urls(cls, "shared", n)
        writer = self.cluster.client()
        try:
            for url, _ in hits:
                writer.set(shared_key(url), servers.body_for(self.bases, url[len(
                    self.origin.base):]), ex=3600)
        finally:
            writer.close()
        for scenario in ("shared", "miss"):
            for rnd, measured, order in self.each_round(rounds):
                for w in order:
                    loader = w.build([self.url(cls, f"warm-{w.name}-{scenario}-r{rnd}", 0)])
                    urls = hits if scenario == "shared" else self.urls(
                        cls, f"miss-{w.name}-r{rnd}", n)
                    self.run(measured, scenario, cls, w, loader, urls)
                if scenario == "miss":
                    self.cluster.flush()  # what the misses wrote: Redis memory stays bounded
            self.cluster.flush()

    def run(self, measured, scenario, cls, w, loader, urls) -> None:
        if measured:
            self.timed(scenario, cls, w, loader, urls)
        else:
            w.call(op="pass", id=loader, urls=urls)
        w.call(op="drop", id=loader)

    def faults(self) -> None:
        cls, n = "jpeg512", self.args.hung_loads
        rounds = min(self.args.rounds, 3)
        for rnd, measured, order in self.each_round(rounds):
            if not measured:
                continue  # Dynamo's hung rounds take many seconds: no unmeasured one
            built = {w.name: w.build([self.url(cls, f"warm-{w.name}-hung-r{rnd}", 0)])
                     for w in order}
            self.cluster.hang()
            try:
                for w in order:
                    self.timed("hung", cls, w, built[w.name], self.urls(
                        cls, f"hung-{w.name}-r{rnd}", n))
            finally:
                self.cluster.resume()
            for w in order:
                w.call(op="drop", id=built[w.name])
        built = {(w.name, rnd): w.build([self.url(cls, f"warm-{w.name}-outage-r{rnd}", 0)])
                 for rnd in range(rounds) for w in self.workers}
        self.cluster.kill()
        for rnd, measured, order in self.each_round(rounds - 1):
            for w in order:
                self.timed("outage", cls, w, built[(w.name, rnd)], self.urls(
                    cls, f"outage-{w.name}-r{rnd}", self.args.io_loads[cls]))


def decode_floor_ms(bases: dict[str, list[bytes]]) -> dict[str, float]:
    """Per class, the CPU of Pillow's decode alone (``Image.open(b).load()``, one thread, the
    median of the base images over a few passes): what every implementation must spend per
    shared hit or miss, so Dynamo's CPU per load over it bounds the ratio any loader reaches."""
    import io

    from PIL import Image

    floors = {}
    for cls, images in bases.items():
        times = []
        for _ in range(3):
            for data in images:
                start = time.thread_time()
                Image.open(io.BytesIO(data)).load()
                times.append(time.thread_time() - start)
        floors[cls] = 1000 * sorted(times)[len(times) // 2]
    return floors


def summarize(results: list[dict]) -> dict:
    by_rate = sorted(results, key=lambda r: r["loads"] / r["wall_s"])
    median = by_rate[(len(by_rate) - 1) // 2]
    return {
        "loads_per_s": median["loads"] / median["wall_s"],
        "p50_ms": median["p50_ms"],
        "p99_ms": median["p99_ms"],
        "max_ms": max(r["max_ms"] for r in results),
        "cpu_ms_per_load": 1000 * median["cpu_s"] / median["loads"],
        "loop_cpu_ms_per_load": 1000 * median["loop_cpu_s"] / median["loads"],
        "failed": sum(r["failed"] for r in results),
        "failure_examples": [f for r in results for f in r["failure_examples"]][:3],
        "loads": sum(r["loads"] for r in results),
        "origin_requests": sum(r["origin_requests"] for r in results),
        "round_loads_per_s": [round(r["loads"] / r["wall_s"], 1) for r in results],
    }


def report(rounds: dict, floors: dict[str, float]) -> tuple[list[dict], list[dict]]:
    """(one summary per scenario, class and implementation; docs rows, one per case)."""
    cases = list(dict.fromkeys((s, c) for s, c, _ in rounds))
    summaries, docs = [], []
    for scenario, cls in cases:
        s = {name: summarize(rounds[(scenario, cls, name)])
             for name in (*IMPLS, BEFORE) if (scenario, cls, name) in rounds}
        for name, row in s.items():
            summaries.append({"scenario": scenario, "class": cls, "impl": name, **row})
        mm, dyn, npy = s["mmcache"], s["dynamo"], s.get("mmcache-numpy")
        ratio = mm["loads_per_s"] / dyn["loads_per_s"] if dyn["loads_per_s"] else None
        goal = GOALS.get((scenario, cls), GOALS.get(scenario))
        if scenario in ("hung", "outage"):
            target = "0 failed"
        else:
            target = f">= {goal:g}x" if goal else "-"
        ext, side = servers.CLASSES[cls]
        note = (f"loop-thread CPU per load: {mm['loop_cpu_ms_per_load']:.3f} ms "
                f"(Dynamo {dyn['loop_cpu_ms_per_load']:.3f}); process CPU "
                f"{mm['cpu_ms_per_load']:.2f} ms (Dynamo {dyn['cpu_ms_per_load']:.2f})")
        if npy:
            note += (f"; numpy API {npy['loads_per_s']:.0f} loads/s "
                     f"({npy['loads_per_s'] / mm['loads_per_s']:.2f}x the PIL drop-in), "
                     f"p99 {npy['p99_ms']:.2f} ms")
        before = s.get(BEFORE)
        if before:
            note += (f"; the earlier build's drop-in {before['loads_per_s']:.0f} loads/s "
                     f"({before['loads_per_s'] / dyn['loads_per_s']:.3f}x Dynamo), "
                     f"p50 {before['p50_ms']:.3f} ms, loop-thread CPU "
                     f"{before['loop_cpu_ms_per_load']:.3f} ms per load")
        if scenario in ("shared", "miss"):
            floor = floors[cls]
            note += (f"; Pillow's decode alone {floor:.2f} ms CPU, so no loader passes "
                     f"{dyn['cpu_ms_per_load'] / floor:.2f}x here")
        if scenario in ("hung", "outage"):
            note += f"; failed: mmcache {mm['failed']}, Dynamo {dyn['failed']}"
        if scenario in ("memory", "shared"):
            note += f"; origin GETs {mm['origin_requests']} (Dynamo {dyn['origin_requests']})"
        kind = "JPEG" if ext == "jpg" else "PNG"
        docs.append({
            "scenario": f"python: {SCENARIO_TITLES[scenario]}, {kind} {side} px (PIL images)",
            "subject": {"ops_per_s": round(mm["loads_per_s"], 1),
                        "p50_ms": round(mm["p50_ms"], 3), "p99_ms": round(mm["p99_ms"], 3)},
            "baseline_name": "Dynamo's ImageLoader (ai-dynamo 1.6.1)",
            "baseline": {"ops_per_s": round(dyn["loads_per_s"], 1),
                         "p99_ms": round(dyn["p99_ms"], 3)},
            "ratio_kind": "x loads/s",
            "ratio": None if ratio is None else round(ratio, 3),
            "target": target,
            "met": (mm["failed"] == 0) if target == "0 failed" else (
                None if goal is None or ratio is None else ratio >= goal),
            "note": note,
        })
    return summaries, docs


def markdown(summaries: list[dict]) -> str:
    lines = ["| scenario | class | implementation | loads/s | p50 ms | p99 ms | CPU ms/load "
             "| loop CPU ms/load | failed | origin GETs |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summaries:
        lines.append(f"| {r['scenario']} | {r['class']} | {r['impl']} | {r['loads_per_s']:.1f} "
                     f"| {r['p50_ms']:.3f} | {r['p99_ms']:.2f} | {r['cpu_ms_per_load']:.3f} "
                     f"| {r['loop_cpu_ms_per_load']:.3f} | {r['failed']} "
                     f"| {r['origin_requests']} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 rounds, a quarter of the loads")
    p.add_argument("--rounds", type=int, help="measured rounds per scenario (default 5)")
    p.add_argument("--classes", help="comma-separated image classes (default all)")
    p.add_argument("--impls", help="comma-separated implementations (default all three)")
    p.add_argument("--no-faults", action="store_true", help="skip the hung and outage cases")
    p.add_argument("--out", type=Path, default=REPO / "target" / "bench" / "python.json")
    p.add_argument("--recorded", help="the run's `recorded` note (default: the date, the "
                   "machine's CPUs and kernel)")
    p.add_argument("--verbose", action="store_true", help="keep the loaders' log output")
    p.add_argument("--before", type=Path, help="a folder holding an earlier build's `mmcache` "
                   f"package: adds `{BEFORE}`, its drop-in, to the implementations")
    a = p.parse_args()
    a.rounds = a.rounds or (2 if a.quick else 5)
    a.recorded = a.recorded or (
        f"{time.strftime('%Y-%m-%d %H:%M')}, dynamo_compare.py{' --quick' if a.quick else ''}, "
        f"{os.cpu_count()} CPUs, {platform.platform()}")
    scale = 4 if a.quick else 1
    a.memory_loads = MEMORY_LOADS // scale
    a.io_loads = {k: max(16, v // scale) for k, v in IO_LOADS.items()}
    a.hung_loads = 8 if a.quick else 16
    a.classes = a.classes.split(",") if a.classes else list(servers.CLASSES)
    a.impls = a.impls.split(",") if a.impls else list(IMPLS)
    unknown = [c for c in a.classes if c not in servers.CLASSES]
    unknown += [i for i in a.impls if i not in IMPLS]
    if unknown or not {"mmcache", "dynamo"} <= set(a.impls):
        p.error(f"unknown classes or implementations {unknown} (mmcache and dynamo required)")
    if a.before is not None:
        if not (a.before / "mmcache" / "__init__.py").is_file():
            p.error(f"--before {a.before}: no mmcache package there")
        a.impls.append(BEFORE)
    return a


def main() -> int:
    args = parse_args()
    t0 = time.monotonic()
    print("generating images ...", file=sys.stderr, flush=True)
    bases = servers.make_bases()
    origin = cluster = None
    workers: list[Worker] = []
    try:
        origin = servers.Origin(bases)
        cluster = servers.Cluster()
        env = {"DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1",
               "DYN_MM_SHARED_IMAGE_CACHE_URL": cluster.url, "DYN_MM_ALLOW_INTERNAL": "1"}
        workers = [Worker(name, {**env, **before_env(args, name)}, args.verbose)
                   for name in args.impls]
        print(f"origin {origin.base}, cluster {cluster.url}; {args.rounds} rounds at "
              f"concurrency {worker.CONCURRENCY}", file=sys.stderr, flush=True)
        bench = Bench(args, bases, origin, cluster, workers)
        for cls in args.classes:
            bench.image_class(cls)
        if not args.no_faults:
            bench.faults()
        versions = {w.name: w.versions for w in workers}
    finally:
        for w in workers:
            w.close()
        if cluster is not None:
            cluster.close()
        if origin is not None:
            origin.close()
    floors = decode_floor_ms({cls: bases[cls] for cls in args.classes})
    summaries, docs = report(bench.rounds, floors)
    print(markdown(summaries))
    out = {
        "benchmark": "mmcache.dynamo.ImageLoader and mmcache.Loader vs Dynamo's ImageLoader",
        "recorded": args.recorded,
        "concurrency": worker.CONCURRENCY,
        "quick": args.quick,
        "rounds": args.rounds,
        "images": {cls: {"format": ext, "side_px": side,
                         "encoded_bytes": [len(b) for b in bases[cls]]}
                   for cls, (ext, side) in servers.CLASSES.items()},
        "versions": versions,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "elapsed_s": round(time.monotonic() - t0, 1),
        "decode_floor_ms": floors,
        "summaries": summaries,
        "rows": docs,
        "all_targets_met": all(r["met"] is not False for r in docs),
    }
    write_out(args.out, out)
    return 0


def write_out(path: Path, out: dict) -> None:
    """A run's JSON (`rows` in docs/bench-results.json's form), for `bench-docs --merge`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {path} in {out['elapsed_s']:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
