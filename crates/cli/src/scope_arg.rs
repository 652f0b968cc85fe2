//! The `--scope` argument, read alike by every command.

use anyhow::Context;
use mmcache_loader::Scope;

/// The `--scope` argument as a [`Scope`], read alike by every command: with session scoping
/// off (`session_scoped` false) it changes nothing, and a note on stderr says so.
pub(crate) fn parse_scope(
    raw: Option<&str>,
    session_scoped: bool,
) -> anyhow::Result<Option<Scope>> {
    let scope = raw
        .map(|s| Scope::new(s).context("--scope: blank, over 256 bytes, or not printable ASCII"))
        .transpose()?;
    if scope.is_some() && !session_scoped {
        let var = mmcache_loader::env::SESSION_SCOPED;
        eprintln!("note: --scope is ignored: {var} is off");
    }
    Ok(scope)
}
