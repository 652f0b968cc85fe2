"""The operator's kit in deploy/: every metric the Grafana dashboard and the Prometheus alert
rules query is one the code registers (names read from the Rust sources, not a hand list) and
that docs/metrics.md documents; `_bucket`/`_count`/`_sum` only on histograms."""

import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r"\b((?:mmcache|dynamo_component)_[a-z0-9_]+)\b")
SUFFIXES = ("_bucket", "_count", "_sum")


def registered():
    """Metric names as string literals in the crates' sources, and the names a macro there
    builds (`concat!($prefix, "_reads_total")`) for each name literal of its file (disk-cache's
    families: the disk tier's and the host pixel tier's)."""
    names = set()
    for path in (ROOT / "crates").glob("*/src/**/*.rs"):
        text = path.read_text()
        literals = re.findall(r'"((?:mmcache|dynamo_component)_[a-z0-9_]+)"', text)
        names.update(literals)
        for suffix in re.findall(r'concat!\(\$prefix, "([a-z0-9_]+)"\)', text):
            names.update(prefix + suffix for prefix in literals)
    return names


def histograms():
    """Names docs/metrics.md lists with type histogram."""
    docs = (ROOT / "docs/metrics.md").read_text()
    return set(re.findall(r"^\| `([a-z0-9_]+)` \| histogram", docs, re.M))


def queried(expressions):
    out = set()
    for expr in expressions:
        # Label values and legend text are not metric names.
        expr = re.sub(r'"[^"]*"', '""', expr)
        out.update(NAME.findall(expr))
    return out


def dashboard_exprs():
    board = json.loads((ROOT / "deploy/grafana/mmcache.json").read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def alert_exprs():
    text = (ROOT / "deploy/prometheus/alerts.yaml").read_text()
    # `expr:` values, folded (>-) or inline; a YAML parser is not needed for this file's shape.
    exprs, current = [], None
    for line in text.splitlines():
        m = re.match(r"\s*expr:\s*(.*)$", line)
        if m:
            current = [] if m.group(1) in (">-", ">", "|") else None
            if current is None:
                exprs.append(m.group(1))
            continue
        if current is not None:
            if re.match(r"\s+[a-z_]+:", line) and not line.strip().startswith(("sum", "/")):
                exprs.append(" ".join(current))
                current = None
            else:
                current.append(line.strip())
    return exprs


def check(exprs, where):
    names, hist = registered(), histograms()
    docs = (ROOT / "docs/metrics.md").read_text()
    assert names, "no metric names found in the sources"
    found = queried(exprs)
    assert found, f"{where}: no metric queried"
    for name in sorted(found):
        base = name
        for s in SUFFIXES:
            if name.endswith(s) and name[: -len(s)] in hist:
                base = name[: -len(s)]
        assert base in names, f"{where} queries {name}, which no crate registers"
        assert f"`{base}`" in docs, f"{where} queries {base}, missing from docs/metrics.md"
        if base in hist:
            assert base != name, f"{where} uses histogram {base} without _bucket/_count/_sum"
    return found


def test_dashboard_queries_registered_metrics():
    found = check(dashboard_exprs(), "deploy/grafana/mmcache.json")
    for must in (
        "mmcache_loads_total",
        "dynamo_component_image_shared_cache_get_duration_seconds_bucket",
        "dynamo_component_image_shared_cache_set_duration_seconds_bucket",
        "mmcache_shared_cache_breaker_transitions_total",
        "mmcache_shared_cache_hedges_total",
        "mmcache_disk_cache_reads_total",
        "mmcache_decode_budget_total",
    ):
        assert must in found, must


def test_alert_rules_query_registered_metrics():
    exprs = alert_exprs()
    assert len(exprs) >= 5, exprs
    check(exprs, "deploy/prometheus/alerts.yaml")


def test_the_check_catches_an_unknown_name():
    try:
        check(['rate(mmcache_no_such_metric_total[5m])'], "probe")
    except AssertionError as e:
        assert "mmcache_no_such_metric_total" in str(e)
    else:
        raise AssertionError("an unknown metric passed")


def test_the_kubernetes_configmap_carries_deploy_redis_node_conf():
    node_conf = (ROOT / "deploy/redis/node.conf").read_text()
    settings = [l for l in node_conf.splitlines() if l.strip() and not l.startswith("#")]
    manifest = (ROOT / "deploy/kubernetes/redis-cluster.yaml").read_text()
    block = manifest.split("node.conf: |\n", 1)[1].split("---", 1)[0]
    copied = [l.strip() for l in block.splitlines() if l.startswith("    ")]
    assert copied == settings, (copied, settings)
    for must in ("cluster-require-full-coverage no", "cluster-config-file nodes.conf"):
        assert must in settings, must


def manifests(name):
    import yaml  # PyYAML, which yamllint (tests/requirements.txt) installs

    return list(yaml.safe_load_all((ROOT / "deploy/kubernetes" / name).read_text()))


def test_cache_names_resolve_from_the_workers_namespace():
    """The names the workers use carry the cache's namespace: its Service in the worker's URL,
    and the hostnames its nodes announce (a short name resolves only inside its namespace)."""
    cache = [d for d in manifests("redis-cluster.yaml") if d["kind"] != "Namespace"]
    (namespace,) = {d["metadata"].get("namespace") for d in cache}
    assert namespace, "the cache's objects name their namespace"
    services = {d["metadata"]["name"]: d for d in cache if d["kind"] == "Service"}
    (nodes,) = [d for d in cache if d["kind"] == "StatefulSet"]
    headless = nodes["spec"]["serviceName"]
    assert services[headless]["spec"]["clusterIP"] == "None"
    (container,) = nodes["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    domain = env["CLUSTER_DOMAIN"]["value"]
    args = " ".join(container["args"])
    announced = re.search(r'--cluster-announce-hostname\s+"([^"]+)"', args).group(1)
    assert announced == f"$(hostname).{headless}.$POD_NAMESPACE.svc.$CLUSTER_DOMAIN", announced
    assert "--cluster-preferred-endpoint-type hostname" in args
    # The worker's URL: the discovery Service, qualified.
    (secret,) = [d for d in manifests("worker.yaml") if d["kind"] == "Secret"]
    host = re.match(r"rediss?://[^@]*@([^:/]+)", secret["stringData"]["url"]).group(1)
    discovery = [n for n in services if n != headless]
    assert host in {f"{n}.{namespace}.svc.{domain}" for n in discovery}, host
    # The worker reads the Secret in its own namespace: the Secret is in worker.yaml, not beside
    # the cache.
    assert not any(d["kind"] == "Secret" and d["metadata"]["name"] == "image-cache-url" for d in cache)
