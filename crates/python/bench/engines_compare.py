#!/usr/bin/env python3
"""What a vLLM or SGLang server gets: mmcache's connector (vLLM) or plugin (SGLang) against the
engine's own image loading, each implementation in a process of its own, on the same images,
origin and cluster.

    target/venv-engines/bin/python crates/python/bench/engines_compare.py --engine vllm|sglang
        [--quick] [--rounds N] [--classes jpeg512,png1024] [--out PATH]

``cargo xtask bench --scenario vllm`` (or ``sglang``) runs it in target/venv-engines with a
release build of mmcache. The implementations and how each loads are engine_worker.py's.

Images (servers.py): JPEG 512, 1024 and 2048 px and PNG 1024 px, every URL with bytes of its
own. In every round each implementation runs once, the first alternating from round to round;
one unmeasured round first; the median round (by loads/s) is reported. Scenarios, per class:

* ``repeated``: the same 4 URLs over and over (each loaded once, unmeasured, first);
* ``shared``: entries written beforehand at Dynamo's keys by redis-py (another process filled
  the shared cache); empty memory each round. ``http-media-cache`` loads the URLs once first,
  unmeasured (a warm host disk); ``http`` and ``sglang``, having no shared cache, fetch them;
* ``miss``: fresh URLs every round: the origin (and, for mmcache and Dynamo, a shared-cache
  SET).

Output: a Markdown table on stdout; JSON at ``--out`` whose ``rows`` are in the form of
docs/bench-results.json (``cargo xtask bench-docs --merge FILE`` records them).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import dynamo_compare
import engine_worker
import servers

REPO = Path(__file__).resolve().parents[3]
SUBJECT = {"vllm": "mmcache", "sglang": "mmcache-sglang"}
IMPLS = {"vllm": engine_worker.VLLM, "sglang": engine_worker.SGLANG}
# Loads of one timed pass, by class: about a second of the engine's own work or more.
IO_LOADS = {"jpeg512": 600, "jpeg1024": 300, "jpeg2048": 96, "png1024": 160}
REPEATED = 4
# (scenario, baseline) -> the subject's loads/s over the baseline's: the issues' goals.
GOALS = {
    "vllm": {("repeated", "http"): 20.0, ("repeated", "http-media-cache"): 5.0,
             ("repeated", "dynamo"): 3.0, ("miss", "http"): 1.5, ("miss", "dynamo"): 1.0,
             ("shared", "http-media-cache"): 1.3, ("shared", "dynamo"): 1.0},
    "sglang": {("repeated", "sglang"): 20.0, ("miss", "sglang"): 1.5,
               ("shared", "sglang"): 2.0},
}
NAMES = {
    "http": "vLLM 0.34.0's http connector",
    "http-media-cache": "vLLM's http connector with VLLM_MEDIA_CACHE",
    "dynamo": "Dynamo's vLLM connector (ai-dynamo 1.6.1)",
    "sglang": "SGLang 0.5.23's load_image",
}
TITLES = {"repeated": "4 images repeated", "shared": "shared hit", "miss": "miss"}


class Worker(dynamo_compare.Worker):
    """A worker process running one engine implementation (engine_worker.main)."""

    def __init__(self, name: str, env: dict[str, str], verbose: bool) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=engine_worker.main, args=(name, child, env, verbose),
                                daemon=True)
        self.proc.start()
        self.versions = self.wait(300)["versions"]


class Bench:
    def __init__(self, args, bases, origin, cluster, workers) -> None:
        self.args, self.bases, self.origin, self.cluster = args, bases, origin, cluster
        self.workers = workers
        self.rounds: dict[tuple[str, str, str], list[dict]] = {}

    def urls(self, cls: str, tag: str, n: int) -> list:
        ext, side = servers.CLASSES[cls]
        return [(f"{self.origin.base}/{cls}/{tag}/{i}.{ext}", (side, side)) for i in range(n)]

    def timed(self, scenario: str, cls: str, w: Worker, urls: list, measured: bool) -> None:
        before = self.origin.requests()
        result = w.call(op="pass", urls=urls)
        if not measured:
            return
        result["origin_requests"] = self.origin.requests() - before
        self.rounds.setdefault((scenario, cls, w.name), []).append(result)
        print(f"  {scenario:8} {cls:9} {w.name:16} {result['loads'] / result['wall_s']:9.1f} "
              f"loads/s  p50 {result['p50_ms']:7.2f} ms  p99 {result['p99_ms']:7.2f} ms  "
              f"failed {result['failed']}", file=sys.stderr, flush=True)

    def each_round(self):
        for rnd in range(self.args.rounds + 1):
            order = list(self.workers) if rnd % 2 == 0 else list(reversed(self.workers))
            yield rnd, rnd > 0, order

    def image_class(self, cls: str) -> None:
        n = self.args.io_loads[cls]
        for rnd, measured, order in self.each_round():
            for w in order:
                w.call(op="reset")
                four = self.urls(cls, f"repeated-{w.name}-r{rnd}", REPEATED)
                w.call(op="pass", urls=four)
                self.timed("repeated", cls, w, [four[i % REPEATED] for i in range(
                    self.args.repeated_loads[cls])], measured)
        hits = self.urls(cls, "shared", n)
        writer = self.cluster.client()
        try:
            for url, _ in hits:
                body = servers.body_for(self.bases, url[len(self.origin.base):])
                writer.set(dynamo_compare.shared_key(url), body, ex=3600)
        finally:
            writer.close()
        for rnd, measured, order in self.each_round():
            for w in order:
                w.call(op="reset")
                if w.name == "http-media-cache":
                    w.call(op="pass", urls=hits)  # a warm host disk
                self.timed("shared", cls, w, hits, measured)
        for rnd, measured, order in self.each_round():
            for w in order:
                w.call(op="reset")
                self.timed("miss", cls, w, self.urls(cls, f"miss-{w.name}-r{rnd}", n), measured)
            self.cluster.flush()  # what the misses wrote: Redis memory stays bounded


def report(engine: str, rounds: dict) -> tuple[list[dict], list[dict]]:
    summaries, docs = [], []
    subject = SUBJECT[engine]
    for scenario, cls in dict.fromkeys((s, c) for s, c, _ in rounds):
        s = {name: dynamo_compare.summarize(rounds[(scenario, cls, name)])
             for name in IMPLS[engine] if (scenario, cls, name) in rounds}
        for name, row in s.items():
            summaries.append({"scenario": scenario, "class": cls, "impl": name, **row})
        mm = s[subject]
        ext, side = servers.CLASSES[cls]
        others = "; ".join(f"{name} {row['loads_per_s']:.0f} loads/s, {row['origin_requests']} "
                           f"origin GETs" for name, row in s.items())
        for (goal_scenario, base), goal in GOALS[engine].items():
            if goal_scenario != scenario or base not in s:
                continue
            b = s[base]
            ratio = mm["loads_per_s"] / b["loads_per_s"] if b["loads_per_s"] else None
            docs.append({
                "scenario": f"{engine}: {TITLES[scenario]}, {'JPEG' if ext == 'jpg' else 'PNG'} "
                            f"{side} px, vs {base}",
                "subject": {"ops_per_s": round(mm["loads_per_s"], 1),
                            "p50_ms": round(mm["p50_ms"], 3), "p99_ms": round(mm["p99_ms"], 3)},
                "baseline_name": NAMES[base],
                "baseline": {"ops_per_s": round(b["loads_per_s"], 1),
                             "p99_ms": round(b["p99_ms"], 3)},
                "ratio_kind": "x loads/s",
                "ratio": None if ratio is None else round(ratio, 3),
                # A baseline's failures would flatter the ratio: no verdict then.
                "target": f">= {goal:g}x" if not b["failed"] else (
                    f"{goal:g}x (no verdict: {base} failed {b['failed']} loads)"),
                "met": None if ratio is None or b["failed"] else (
                    ratio >= goal and mm["failed"] == 0),
                "note": f"{others}; failed: {subject} {mm['failed']}, {base} {b['failed']}",
            })
    return summaries, docs


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=sorted(SUBJECT), required=True)
    p.add_argument("--quick", action="store_true", help="1 round, a quarter of the loads")
    p.add_argument("--rounds", type=int, help="measured rounds per scenario (default 3)")
    p.add_argument("--classes", help="comma-separated image classes (default all)")
    p.add_argument("--out", type=Path)
    p.add_argument("--recorded", help="the run's `recorded` note")
    p.add_argument("--verbose", action="store_true", help="keep the loaders' log output")
    a = p.parse_args()
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.out = a.out or REPO / "target" / "bench" / f"{a.engine}.json"
    a.recorded = a.recorded or (
        f"{time.strftime('%Y-%m-%d %H:%M')}, engines_compare.py --engine {a.engine}"
        f"{' --quick' if a.quick else ''}, {os.cpu_count()} CPUs, {platform.platform()}")
    scale = 4 if a.quick else 1
    a.io_loads = {k: max(16, v // scale) for k, v in IO_LOADS.items()}
    # Repeated loads: twice a pass of misses (the engines' own load each again).
    a.repeated_loads = {k: 2 * v for k, v in a.io_loads.items()}
    a.classes = a.classes.split(",") if a.classes else list(servers.CLASSES)
    if a.engine == "vllm" and not os.environ.get("MMCACHE_DYNAMO_WHEEL"):
        p.error("MMCACHE_DYNAMO_WHEEL must name ai-dynamo 1.6.1's wheel (Dynamo's connector)")
    return a


def main() -> int:
    args = parse_args()
    t0 = time.monotonic()
    bases = servers.make_bases()
    origin = cluster = None
    workers: list[Worker] = []
    try:
        origin = servers.Origin(bases)
        cluster = servers.Cluster()
        env = {"DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1",
               "DYN_MM_SHARED_IMAGE_CACHE_URL": cluster.url, "DYN_MM_ALLOW_INTERNAL": "1"}
        workers = [Worker(name, env, args.verbose) for name in IMPLS[args.engine]]
        bench = Bench(args, bases, origin, cluster, workers)
        for cls in args.classes:
            bench.image_class(cls)
        versions = {w.name: w.versions for w in workers}
    finally:
        for w in workers:
            w.close()
        if cluster is not None:
            cluster.close()
        if origin is not None:
            origin.close()
    summaries, docs = report(args.engine, bench.rounds)
    print(dynamo_compare.markdown(summaries))
    out = {
        "benchmark": f"mmcache in {args.engine} against {args.engine}'s own image loading",
        "recorded": args.recorded,
        "concurrency": engine_worker.CONCURRENCY[args.engine],
        "quick": args.quick,
        "rounds": args.rounds,
        "versions": versions,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "summaries": summaries,
        "rows": docs,
        "all_targets_met": all(r["met"] is not False for r in docs),
    }
    dynamo_compare.write_out(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
