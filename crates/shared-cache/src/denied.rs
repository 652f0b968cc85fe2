//! Permission denials: `NOPERM`, `NOAUTH` and `WRONGPASS` (and a script's ACL failure, which
//! Redis 7.0 and Valkey answer with `ERR`). A retry never heals them: only an operator's
//! change of the ACL or the URL does. So they are not ordinary error replies: a denied
//! command is logged at error level, counted under `kind="denied"`, and not sent again on that
//! key space for [`DENIED_COOLDOWN`] (skipped, `reason="denied"`, the load goes on without the
//! cache); then the next operation that sends it probes again, so a fixed ACL is noticed
//! without a restart. A denial at connect (credentials, or discovery's `CLUSTER SLOTS`) holds
//! back every operation for the same cool-down.
//!
//! The gates are [`Breakers`] that open at the first failure, keyed by command and key space,
//! so a denied `STRLEN` on the embedding keys stops neither image reads nor `SET`s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::breaker::{Admit, BreakerConfig, Breakers, Transition};

/// How long a denied command (or a denied connect) is not sent again: then one operation
/// probes. Long enough that a worker whose ACL lacks a command logs one error line and pays one
/// failed round trip per command every half minute, short enough that hits resume within half a
/// minute of the fix.
pub const DENIED_COOLDOWN: Duration = Duration::from_secs(30);

/// Where a fix goes: named in every denial's log line.
pub(crate) const FIX_HINT: &str = "check the user and password in DYN_MM_SHARED_IMAGE_CACHE_URL \
     and the user's ACL against the recipe in docs/deployment.md (ACLs)";

/// What the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refused {
    /// The user may not run the command (`NOPERM ... to run the '<command>' command`).
    Command,
    /// The user may not touch keys of this key space (`NOPERM ... access ... key`).
    Key,
    /// The credentials (`WRONGPASS`, or `NOAUTH`: the server wants a password the URL lacks).
    Credentials,
}

impl Refused {
    /// Its name in logs and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Key => "key pattern",
            Self::Credentials => "credentials",
        }
    }
}

/// One denial: what was refused, never a key or a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Denial {
    /// The command refused, upper case (`STRLEN`, `CLUSTER SLOTS`): as the server named it,
    /// else the command this client sent (`AUTH` for credentials).
    pub command: String,
    /// The key space of the key it was sent on (the key up to its hash tag, such as
    /// `dynamo:mm:image:`); `None` at connect.
    pub key_prefix: Option<String>,
    /// What was refused.
    pub refused: Refused,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} denied ({})", self.command, self.refused.as_str())?;
        if let Some(prefix) = &self.key_prefix {
            write!(f, " on keys {prefix}*")?;
        }
        Ok(())
    }
}

/// The error line of a denial (once per cool-down of its gate).
pub(crate) fn log(denial: &Denial) {
    tracing::error!(
        command = %denial.command,
        key_prefix = denial.key_prefix.as_deref().unwrap_or(""),
        refused = denial.refused.as_str(),
        "shared image cache permission denied: {denial}; loads continue from the origin and it \
         is not sent again for {} s; {FIX_HINT}",
        DENIED_COOLDOWN.as_secs()
    );
}

/// Whether `e` is a permission denial (see the module docs).
pub(crate) fn is_denial(e: &redis::RedisError) -> bool {
    use redis::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::Server(redis::ServerErrorKind::NoPerm) | ErrorKind::AuthenticationFailed
    ) || matches!(e.code(), Some("NOPERM" | "NOAUTH" | "WRONGPASS"))
    {
        return true;
    }
    // Wrapped errors keep only their text: a failed AUTH at connect comes back as an I/O error
    // "Failed to create initial connections - Io: Password authentication failed".
    let text = e.to_string();
    text.contains("Password authentication failed")
        // A script's call refused by the ACL: Redis 7.0 ("The user executing the script can't
        // run this command"), Valkey and Redis 7.2+ ("ACL failure in script").
        || (e.code() == Some("ERR")
            && (text.contains("user executing the script can't") || text.contains("ACL failure")))
}

/// What `e` (a denial) refused: the command the server named, else `sent`'s first command.
pub(crate) fn describe(e: &redis::RedisError, sent: &[&str], key: Option<&str>) -> Denial {
    let text = e.to_string();
    let credentials = text.contains("Password authentication failed")
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || e.kind() == redis::ErrorKind::AuthenticationFailed;
    let named = named_command(&text);
    let refused = if credentials {
        Refused::Credentials
    } else if named.is_none() && text.contains("key") {
        Refused::Key
    } else {
        Refused::Command
    };
    let command = match (refused, named) {
        (Refused::Credentials, _) => CREDENTIALS.to_owned(),
        (_, Some(named)) => named,
        _ => sent.first().copied().unwrap_or("?").to_owned(),
    };
    Denial {
        command,
        key_prefix: key.map(key_prefix),
        refused,
    }
}

/// The command in "... to run the 'cluster|slots' command" as `CLUSTER SLOTS`.
fn named_command(text: &str) -> Option<String> {
    let rest = text.split_once("to run the '")?.1;
    let (name, _) = rest.split_once('\'')?;
    (!name.is_empty() && name.len() <= 64).then(|| name.replace('|', " ").to_uppercase())
}

/// A key's key space: the key up to its hash tag (`dynamo:mm:image:`), else up to its last
/// `:`; never the key itself.
pub(crate) fn key_prefix(key: &str) -> String {
    let end = key
        .find('{')
        .or_else(|| key.rfind(':').map(|i| i + 1))
        .unwrap_or(0);
    key[..end].to_owned()
}

/// The command a credentials denial names: its gate holds back every operation on its key
/// space, and any success there closes it.
const CREDENTIALS: &str = "AUTH";

/// The gates an operation sending `sent` passes: one per command, and the credentials gate.
fn gated<'a>(sent: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
    sent.iter().copied().chain(std::iter::once(CREDENTIALS))
}

/// The gates of denied commands, one per command and key space.
pub(crate) struct Gates {
    breakers: Breakers,
    denials: Mutex<HashMap<String, Denial>>,
}

impl Gates {
    pub(crate) fn new() -> Self {
        // Open at the first denial: a retry never heals one.
        let config = BreakerConfig {
            enabled: true,
            failures: 1,
            cooldown: DENIED_COOLDOWN,
        };
        Self {
            breakers: Breakers::new(config),
            denials: Mutex::new(HashMap::new()),
        }
    }

    /// True while nothing is denied: one atomic load.
    pub(crate) fn is_idle(&self) -> bool {
        self.breakers.is_idle()
    }

    fn gate(command: &str, prefix: &str) -> String {
        format!("{command} {prefix}")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Denial>> {
        self.denials.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an operation sending `sent` on `key` may run: `None` (skip it) while one of
    /// its commands is denied on that key space, else the gates it probes (those whose
    /// cool-down ended), which the caller settles or gives back ([`Gates::abandon_probe`]).
    pub(crate) fn admit(&self, sent: &[&str], key: &str, now: Instant) -> Option<Vec<String>> {
        let prefix = key_prefix(key);
        let mut probes = Vec::new();
        let mut skip = false;
        for command in gated(sent) {
            let gate = Self::gate(command, &prefix);
            match self.breakers.admit(&gate, now).0 {
                Admit::Run => {}
                Admit::Skip => skip = true,
                Admit::Probe => probes.push(gate),
            }
        }
        if skip {
            for gate in &probes {
                self.abandon_probe(gate);
            }
            return None;
        }
        Some(probes)
    }

    /// The operation sending `sent` on `key` succeeded: none of its commands is denied there.
    pub(crate) fn on_success(&self, sent: &[&str], key: &str) {
        if self.is_idle() {
            return;
        }
        let prefix = key_prefix(key);
        for command in gated(sent) {
            let gate = Self::gate(command, &prefix);
            if self.breakers.on_success(&gate).is_some() {
                self.lock().remove(&gate);
            }
        }
    }

    /// Records `denial`; whether its gate just opened (then it is logged: once per cool-down).
    pub(crate) fn on_denied(&self, denial: &Denial, now: Instant) -> bool {
        let gate = Self::gate_of(denial);
        let transition: Transition = self.breakers.on_failure(&gate, now);
        self.lock().insert(gate, denial.clone());
        transition.is_some()
    }

    /// The gate a denial closes.
    pub(crate) fn gate_of(denial: &Denial) -> String {
        Self::gate(&denial.command, denial.key_prefix.as_deref().unwrap_or(""))
    }

    /// A probe that never finished (its caller was cancelled): the next one may go.
    pub(crate) fn abandon_probe(&self, gate: &str) {
        self.breakers.abandon_probe(gate);
    }

    /// The denials in force.
    pub(crate) fn denials(&self) -> Vec<Denial> {
        if self.is_idle() {
            return Vec::new();
        }
        let mut all: Vec<Denial> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| (&a.command, &a.key_prefix).cmp(&(&b.command, &b.key_prefix)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_key_spaces_are_named_never_keys() {
        assert_eq!(
            named_command("NoPerm: this user has no permissions to run the 'strlen' command"),
            Some("STRLEN".into())
        );
        assert_eq!(
            named_command("NOPERM User u has no permissions to run the 'cluster|slots' command"),
            Some("CLUSTER SLOTS".into())
        );
        assert_eq!(named_command("NOPERM No permissions to access a key"), None);
        assert_eq!(
            key_prefix("dynamo:mm:image:{ab12}:bytes"),
            "dynamo:mm:image:"
        );
        assert_eq!(
            key_prefix("mmcache:emb:v1:{ab12.0001.3}:chunk"),
            "mmcache:emb:v1:"
        );
        assert_eq!(key_prefix("plain:secret"), "plain:");
        assert_eq!(key_prefix("secret"), "");
    }

    #[test]
    fn a_gate_opens_at_once_skips_for_the_cooldown_then_lets_one_probe() {
        let gates = Gates::new();
        let t0 = Instant::now();
        let key = "dynamo:mm:image:{x}:bytes";
        let read = ["STRLEN", "GETRANGE"];
        assert!(gates.is_idle());
        let denial = Denial {
            command: "GETRANGE".into(),
            key_prefix: Some(key_prefix(key)),
            refused: Refused::Command,
        };
        assert!(gates.on_denied(&denial, t0), "opened: logged");
        assert!(
            !gates.on_denied(&denial, t0),
            "already open: not logged again"
        );
        assert_eq!(gates.admit(&read, key, t0), None, "skipped");
        // Another key space and other commands are not held back.
        assert_eq!(gates.admit(&read, "mmcache:emb:v1:{x}", t0), Some(vec![]));
        assert_eq!(gates.admit(&["SET"], key, t0), Some(vec![]));
        assert_eq!(gates.denials(), vec![denial.clone()]);
        let later = t0 + DENIED_COOLDOWN;
        let probe = vec!["GETRANGE dynamo:mm:image:".to_owned()];
        assert_eq!(gates.admit(&read, key, later), Some(probe.clone()));
        assert_eq!(gates.admit(&read, key, later), None, "one probe");
        assert!(
            gates.on_denied(&denial, later),
            "denied again: logged again"
        );
        let fixed = later + DENIED_COOLDOWN;
        assert_eq!(gates.admit(&read, key, fixed), Some(probe));
        gates.on_success(&read, key);
        assert_eq!(gates.admit(&read, key, fixed), Some(vec![]));
        assert!(gates.denials().is_empty() && gates.is_idle());
    }

    #[test]
    fn a_credentials_denial_holds_back_its_key_space_until_a_success_there() {
        // NOAUTH/WRONGPASS on an operation (a password rotated while a node reconnects) names
        // AUTH, which no operation sends: its gate must still hold them back and close.
        let gates = Gates::new();
        let t0 = Instant::now();
        let key = "dynamo:mm:image:{x}:bytes";
        let denial = Denial {
            command: CREDENTIALS.into(),
            key_prefix: Some(key_prefix(key)),
            refused: Refused::Credentials,
        };
        assert!(gates.on_denied(&denial, t0));
        assert_eq!(gates.admit(&["SET"], key, t0), None, "skipped");
        let later = t0 + DENIED_COOLDOWN;
        let probe = gates.admit(&["SET"], key, later).expect("a probe");
        assert_eq!(probe, vec!["AUTH dynamo:mm:image:".to_owned()]);
        gates.on_success(&["SET"], key);
        assert!(gates.denials().is_empty() && gates.is_idle());
    }
}
