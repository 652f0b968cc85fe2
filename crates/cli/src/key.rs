//! `mmcache key`: the Redis key and disk-tier path of a URL's entry, from the crates' own
//! functions (never formatted here).

use clap::Args;
use mmcache_disk_cache::entry_path;
use mmcache_loader::Config;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::entry_key;

use crate::scope_arg::parse_scope;

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    /// Session scope (used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1)
    #[arg(long, value_name = "S")]
    pub(crate) scope: Option<String>,
    /// The image URL
    #[arg(value_name = "URL")]
    pub(crate) url: String,
}

/// Prints the identity digest, the Redis key and the disk path; exit code 1 when scoped mode
/// without a scope bypasses every cache (there is no key).
pub(crate) fn run(args: KeyArgs) -> anyhow::Result<u8> {
    let config = Config::from_env()?;
    let scope = parse_scope(args.scope.as_deref(), config.session_scoped)?;
    let Some(id) = CacheIdentity::resolve(config.session_scoped, &args.url, scope.as_ref()) else {
        eprintln!(
            "no cache key: DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1 and no usable --scope, so loads \
             of this URL bypass every cache"
        );
        return Ok(1);
    };
    println!("identity digest: {}", id.sha256_hex());
    println!("redis key: {}", entry_key(&id));
    if config.disk_enabled() {
        // Only the path: opening the tier would create the directory (with this user's
        // owner and mode, which the workers might then refuse).
        println!("disk path: {}", entry_path(&config.disk.dir, &id).display());
    } else {
        println!("disk tier: off (MMCACHE_DISK_CACHE_DIR unset)");
    }
    Ok(0)
}
