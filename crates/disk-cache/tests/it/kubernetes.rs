//! deploy/kubernetes/worker.yaml's disk tier as a node runs it: the kubelet makes the hostPath
//! directory (`DirectoryOrCreate`: root, 0755), the manifest's init container runs its own
//! command on it as root, then worker pods of different uids, with the manifest's fsGroup as a
//! supplementary group and `MMCACHE_DISK_CACHE_GROUP` set to it, share the tier. Each pod is a
//! child process with those ids (setgroups, setgid, setuid), so the ownership and modes are the
//! real ones. The paths, ids and the init command are read from the manifest.
#![allow(unsafe_code)] // setgroups(2), setgid(2), setuid(2) in the child before exec: a pod's ids.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_disk_cache::{DiskCache, DiskCacheConfig, entry_path};
use mmcache_test_support::manifest;

use crate::common::{Dir, id};

/// `dir;group;actions` for the child: what the pod runs.
const CHILD: &str = "MMCACHE_TEST_K8S_POD";

/// What a pod writes for image `n`.
fn body(n: usize) -> Bytes {
    Bytes::from(format!("image {n} bytes from a pod").repeat(100))
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A pod: the disk tier of the manifest's settings in a process of these ids. Prints its
/// tier's status; `write:N` stores image N and waits for it, `read:N` asserts it is there.
#[test]
#[ignore = "a pod of kubelet_made_directory_is_shared_by_pods_of_different_uids, run by it"]
fn pod() {
    let spec = std::env::var(CHILD).expect("run by the Kubernetes test");
    let mut parts = spec.split(';');
    let (dir, group, actions) = (
        parts.next().unwrap(),
        parts.next().unwrap().parse::<u32>().unwrap(),
        parts.next().unwrap_or(""),
    );
    let mut config = DiskCacheConfig::new(dir);
    config.group = Some(group);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cache = DiskCache::new(config);
        println!("pod status: {:?}", cache.status());
        for action in actions.split(',').filter(|a| !a.is_empty()) {
            let (what, n) = action.split_once(':').unwrap();
            let n: usize = n.parse().unwrap();
            match what {
                "write" => {
                    cache.put(&id(n), body(n)).await;
                    assert!(cache.flush(Instant::now() + Duration::from_secs(10)).await);
                    assert_eq!(cache.get(&id(n)).await, Some(body(n)), "own write {n}");
                }
                "read" => assert_eq!(cache.get(&id(n)).await, Some(body(n)), "read {n}"),
                other => panic!("unknown action {other}"),
            }
        }
    });
}

/// Runs [`pod`] as `uid`:`gid` with `group` as its one supplementary group (fsGroup); its output.
fn run_pod(dir: &Path, (uid, gid, group): (u32, u32, u32), actions: &str) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "kubernetes::pod",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, format!("{};{group};{actions}", dir.display()));
    // SAFETY: between fork and exec only async-signal-safe syscalls, on values copied in.
    unsafe {
        cmd.pre_exec(move || {
            let groups = [group as libc::gid_t];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("start the pod's process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "pod {uid}:{gid} ({actions}) failed:\n{text}"
    );
    text
}

#[test]
fn kubelet_made_directory_is_shared_by_pods_of_different_uids() {
    if !is_root() {
        assert!(
            !mmcache_test_support::in_ci(),
            "needs root (it makes a directory as the kubelet does and runs pods as other uids), \
             and CI is set: run the tests as root (CI must not skip them)"
        );
        eprintln!("not root, so skipped (outside CI): it runs pods as other uids");
        return;
    }
    let text = manifest::read("worker.yaml");
    let doc = manifest::document(&text, "Deployment");
    let path = manifest::value(doc, "path");
    assert_eq!(manifest::value(doc, "type"), "DirectoryOrCreate");
    assert_eq!(
        manifest::env(doc, "MMCACHE_DISK_CACHE_DIR"),
        Some(path.clone())
    );
    let mounts: Vec<&str> = doc
        .lines()
        .filter(|l| l.contains("mountPath") && l.contains("image-disk-cache"))
        .collect();
    assert_eq!(
        mounts.len(),
        2,
        "the init container and the worker mount the volume"
    );
    for line in mounts {
        assert_eq!(
            manifest::value(line, "mountPath"),
            path,
            "every container mounts the volume at the tier's directory"
        );
    }
    let num = |v: String| -> u32 { v.parse().unwrap() };
    let fs_group = num(manifest::value(doc, "fsGroup"));
    assert_eq!(
        manifest::env(doc, "MMCACHE_DISK_CACHE_GROUP").map(num),
        Some(fs_group),
        "MMCACHE_DISK_CACHE_GROUP is the fsGroup"
    );
    let uids: Vec<u32> = manifest::values(doc, "runAsUser")
        .into_iter()
        .map(num)
        .collect();
    assert_eq!(
        uids.len(),
        2,
        "the pod's uid and the init container's: {uids:?}"
    );
    let (pod_uid, init_uid) = (uids[0], uids[1]);
    assert_eq!(
        init_uid, 0,
        "the init container re-owns the directory as root"
    );
    let pod_gid = num(manifest::value(doc, "runAsGroup"));
    assert_ne!(pod_uid, 0);
    let init = manifest::command(doc, "disk-cache-dir");
    assert_eq!(&init[..2], ["sh", "-c"]);

    let scratch = Dir::new("k8s");
    let host: PathBuf = scratch.0.join(path.trim_start_matches('/'));
    // The kubelet: `DirectoryOrCreate` makes a missing directory as root, mode 0755.
    std::fs::create_dir_all(&host).unwrap();
    std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pod = (pod_uid, pod_gid, fs_group);
    // Without the init step the tier refuses it: the manifest before this fix.
    let out = run_pod(&host, pod, "");
    assert!(
        out.contains("pod status: Refused(ForeignOwner"),
        "a root-owned 0755 directory is refused:\n{out}"
    );

    // The init container's own command, run as root on the node's directory.
    let script = init[2].replace(&path, &host.to_string_lossy());
    let status = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(status.success(), "the init command failed: {script}");
    let meta = std::fs::metadata(&host).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, fs_group, 0o2770),
        "the init step's ownership and mode"
    );

    // A worker pod writes; a pod of another uid (same fsGroup) reads it and writes its own.
    let other = (pod_uid + 1, pod_gid + 1, fs_group);
    let out = run_pod(&host, pod, "write:1");
    assert!(out.contains("pod status: Enabled"), "{out}");
    let entry = std::fs::metadata(entry_path(&host, &id(1))).unwrap();
    assert_eq!(
        (entry.uid(), entry.gid(), entry.mode() & 0o777),
        (pod_uid, fs_group, 0o640),
        "an entry of the shared group"
    );
    run_pod(&host, other, "read:1,write:2");
    run_pod(&host, pod, "read:2");
}
