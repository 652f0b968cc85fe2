//! `mmcache doctor` proves the data path, not only that the cluster answers: as the worker's
//! user, on keys of its own, it runs a worker's commands for images and for embeddings, and
//! names each one denied or failing, with an exit code per class. Real processes.

use crate::common::{mmcache, text};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, acl_recipe, require_redis};

const DENIED: i32 = 14;
const DATA_PATH_FAILED: i32 = 15;
const STEPS: [&str; 5] = ["write", "read", "lease", "release", "delete"];

fn doctor(url: &str) -> (Option<i32>, String, String) {
    text(
        &mmcache()
            .env("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
            .env("DYN_MM_SHARED_IMAGE_CACHE_URL", url)
            .arg("doctor")
            .output()
            .unwrap(),
    )
}

/// The recipe's user with `rules` on every node; the URL workers get.
fn as_user(cluster: &RedisCluster, rules: &[&str]) -> String {
    let recipe = acl_recipe();
    cluster.set_user(&recipe.user, rules).unwrap();
    cluster.url_as(&recipe.user, &recipe.password)
}

fn cluster() -> RedisCluster {
    RedisCluster::start(ClusterOptions::default()).unwrap()
}

#[test]
fn the_recipe_user_passes_every_step_and_leaves_nothing_behind() {
    if !require_redis("the_recipe_user_passes_every_step_and_leaves_nothing_behind") {
        return;
    }
    let cluster = cluster();
    let url = as_user(&cluster, &acl_recipe().rules());
    let (code, stdout, stderr) = doctor(&url);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for space in ["dynamo:mm:image:*", "mmcache:emb:v1:*"] {
        for step in STEPS {
            assert!(
                stdout.lines().any(|l| l.contains(space)
                    && l.contains(&format!(" {step} ("))
                    && l.ends_with(": ok")),
                "no ok {space} {step}: {stdout}"
            );
        }
    }
    // An embedding compute also renews its lease, or leaves the not-stored marker.
    for step in ["renew", "abandon"] {
        assert!(
            stdout.lines().any(|l| l.contains("mmcache:emb:v1:*")
                && l.contains(&format!(" {step} ("))
                && l.ends_with(": ok")),
            "no ok embedding {step}: {stdout}"
        );
    }
    assert!(
        stdout.contains("GETRANGE") && stdout.contains("EVAL"),
        "{stdout}"
    );
    assert!(!stdout.contains(&acl_recipe().password), "{stdout}");
    assert!(cluster.keys_on_masters("*").is_empty(), "keys left behind");
    // The memory sum of the defaults: 1 + 1 + 2 GiB + 512 MiB × 1.375.
    assert!(stdout.contains("   4800  in all"), "{stdout}");
    assert!(stdout.contains("MMCACHE_DECODE_MEMORY_BYTES"), "{stdout}");
}

/// The recipe docs/deployment.md had before: doctor said "no problems found" and exited 0.
#[test]
fn the_old_recipe_is_denied_by_name() {
    if !require_redis("the_old_recipe_is_denied_by_name") {
        return;
    }
    let cluster = cluster();
    let old =
        "on >CHANGE-ME ~dynamo:mm:* +getrange +get +set +del +eval +cluster|slots +info +ping";
    let url = as_user(
        &cluster,
        &std::iter::once("reset")
            .chain(old.split(' '))
            .collect::<Vec<_>>(),
    );
    let (code, stdout, stderr) = doctor(&url);
    assert_eq!(code, Some(DENIED), "{stdout}{stderr}");
    let line = |space: &str, step: &str| {
        stdout
            .lines()
            .find(|l| l.contains(space) && l.contains(&format!(" {step} (")))
            .unwrap_or_else(|| panic!("no {space} {step}: {stdout}"))
            .to_owned()
    };
    let read = line("dynamo:mm:image:*", "read");
    assert!(read.contains("DENIED: STRLEN denied (command)"), "{read}");
    assert!(line("dynamo:mm:image:*", "write").ends_with(": ok"));
    let write = line("mmcache:emb:v1:*", "write");
    assert!(
        write.contains("DENIED: SET denied (key pattern) on keys mmcache:emb:v1:*"),
        "{write}"
    );
    assert!(stdout.contains("exit 14: shared cache denied"), "{stdout}");
}

#[test]
fn each_missing_command_is_named() {
    if !require_redis("each_missing_command_is_named") {
        return;
    }
    let cluster = cluster();
    let recipe = acl_recipe();
    for (rule, denied) in [
        ("+eval", "EVAL denied"),
        ("+del", "DEL denied"),
        ("+info", ""),
    ] {
        let url = as_user(&cluster, &recipe.without(rule));
        let (code, stdout, stderr) = doctor(&url);
        if denied.is_empty() {
            // INFO only tells the engine and version: not a data-path command.
            assert_eq!(code, Some(0), "{rule}: {stdout}{stderr}");
            assert!(stdout.contains("engine: unknown"), "{stdout}");
            continue;
        }
        assert_eq!(code, Some(DENIED), "{rule}: {stdout}{stderr}");
        assert!(stdout.contains(denied), "{rule}: {stdout}");
    }
    // Without PEXPIRE an embedding lease lapses mid-compute: the renew step is denied (a
    // script's refused call; Redis 7.0 does not name it, so the denial names EVAL).
    let url = as_user(&cluster, &recipe.without("+pexpire"));
    let (code, stdout, stderr) = doctor(&url);
    assert_eq!(code, Some(DENIED), "+pexpire: {stdout}{stderr}");
    assert!(
        stdout.lines().any(|l| l.contains("mmcache:emb:v1:*")
            && l.contains(" renew (")
            && l.contains("DENIED")),
        "+pexpire: {stdout}"
    );
    // The release and the abandon, tried before the renew, still work: the renew's denial
    // hides nothing.
    for step in ["release", "abandon"] {
        assert!(
            stdout.lines().any(|l| l.contains("mmcache:emb:v1:*")
                && l.contains(&format!(" {step} ("))
                && l.ends_with(": ok")),
            "+pexpire, {step}: {stdout}"
        );
    }
    // A wrong password: the credentials, not an unreachable cluster.
    let url = cluster.url_as(&recipe.user, "wrong");
    let (code, stdout, stderr) = doctor(&url);
    assert_eq!(code, Some(DENIED), "{stdout}{stderr}");
    assert!(stdout.contains("AUTH denied (credentials)"), "{stdout}");
    assert!(!stdout.contains("exit 10"), "{stdout}");
}

#[test]
fn a_write_the_nodes_refuse_is_a_data_path_failure() {
    if !require_redis("a_write_the_nodes_refuse_is_a_data_path_failure") {
        return;
    }
    let cluster = cluster();
    for i in 0..cluster.nodes.len() {
        cluster
            .cli(i, &["CONFIG", "SET", "maxmemory-policy", "noeviction"])
            .unwrap();
        cluster
            .cli(i, &["CONFIG", "SET", "maxmemory", "1"])
            .unwrap();
    }
    let url = as_user(&cluster, &acl_recipe().rules());
    let (code, stdout, stderr) = doctor(&url);
    assert_eq!(code, Some(DATA_PATH_FAILED), "{stdout}{stderr}");
    assert!(
        stdout.contains("write (SET): FAILED: not written (an error reply"),
        "{stdout}"
    );
}
