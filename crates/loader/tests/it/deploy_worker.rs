//! deploy/kubernetes/worker.yaml's settings are ones the loader accepts, and its memory
//! `resources` hold the most mmcache may hold with them: `Config::memory_parts`, the sum
//! `mmcache doctor` prints, and the host pixel tier's budget, whose memory volume counts in the
//! pod's memory and holds the budget. The comments with the arithmetic are checked against the
//! settings the manifest gives.

use mmcache_loader::{Config, env};
use mmcache_test_support::manifest;

const MIB: u64 = 1 << 20;

#[test]
fn the_worker_manifest_sets_memory_for_its_settings() {
    let text = manifest::read("worker.yaml");
    let doc = manifest::document(&text, "Deployment");
    let mut vars = manifest::env_all(doc);
    // The URL comes from the manifest's Secret (a valueFrom in the Deployment).
    let secret = manifest::document(&text, "Secret");
    vars.push((env::SHARED_URL.to_owned(), manifest::value(secret, "url")));
    for (name, _) in &vars {
        assert!(env::ALL.contains(&name.as_str()), "{name} is not a setting");
    }
    let config =
        Config::from_lookup(|name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
            .expect("the manifest's settings are valid");
    assert!(config.shared_enabled && config.disk_enabled() && config.host_enabled());

    let parts: Vec<u64> = config.memory_parts().iter().map(|p| p.bytes).collect();
    let sum = config.memory_bound();
    let line = format!(
        "# {} = {} MiB",
        parts
            .iter()
            .map(|p| (p / MIB).to_string())
            .collect::<Vec<_>>()
            .join(" + "),
        sum / MIB
    );
    assert!(
        doc.lines().any(|l| l.trim() == line),
        "worker.yaml's comment does not state the sum of its settings: want `{line}`"
    );
    let host = config.host.max_bytes;
    let line = format!(
        "# and once per pod, the host pixel tier's budget on the memory volume: {} MiB",
        host / MIB
    );
    assert!(
        doc.lines().any(|l| l.trim() == line),
        "worker.yaml's comment does not state the host pixel tier's budget: want `{line}`"
    );
    let volume = manifest::value(doc, "sizeLimit");
    assert!(
        manifest::quantity_bytes(&volume) > host,
        "the memory volume ({volume}) does not hold the host pixel tier's budget"
    );
    let memory = manifest::values(doc, "memory");
    assert_eq!(memory.len(), 2, "a request and a limit: {memory:?}");
    for q in &memory {
        assert!(
            manifest::quantity_bytes(q) > sum + host,
            "memory {q} is not above mmcache's {} MiB and its host pixels",
            sum / MIB
        );
    }
    assert_eq!(
        memory[0], memory[1],
        "request = limit: the sum is a worst case, not a peak"
    );
}
