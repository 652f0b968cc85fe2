//! ACL users on every node, and the worker user's recipe read out of docs/deployment.md
//! itself, so the tests run exactly what an operator copies.

use anyhow::{Context, bail};

use super::RedisCluster;

/// The operator's guide that holds the recipe (its one `ACL SETUSER` line).
const DEPLOYMENT_DOC: &str = include_str!("../../../../docs/deployment.md");

/// The worker user of docs/deployment.md: `ACL SETUSER <user> <rules...>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRecipe {
    /// The user's name.
    pub user: String,
    /// Its password (the `>` rule).
    pub password: String,
    /// Every rule after the name, in order.
    pub rules: Vec<String>,
}

/// The recipe of docs/deployment.md.
///
/// # Panics
///
/// Unless the doc has exactly one line starting with `ACL SETUSER ` with a user and a `>`
/// password rule: the recipe must stay one line the tests can find.
pub fn acl_recipe() -> AclRecipe {
    parse_recipe(DEPLOYMENT_DOC).expect("docs/deployment.md's ACL recipe")
}

fn parse_recipe(doc: &str) -> anyhow::Result<AclRecipe> {
    let lines: Vec<&str> = doc
        .lines()
        .filter(|l| l.trim_start().starts_with("ACL SETUSER "))
        .collect();
    let [line] = lines[..] else {
        bail!("{} lines start with `ACL SETUSER `, not one", lines.len());
    };
    let mut words = line.split_whitespace().skip(2);
    let user = words.next().context("no user name")?.to_owned();
    let rules: Vec<String> = words.map(str::to_owned).collect();
    let password = rules
        .iter()
        .find_map(|r| r.strip_prefix('>'))
        .context("no `>password` rule")?
        .to_owned();
    Ok(AclRecipe {
        user,
        password,
        rules,
    })
}

impl AclRecipe {
    /// The rules as `&str`s, for [`RedisCluster::set_user`].
    pub fn rules(&self) -> Vec<&str> {
        self.rules.iter().map(String::as_str).collect()
    }

    /// The rules without `rule` (which must be there): a user missing one permission.
    ///
    /// # Panics
    ///
    /// When the recipe has no such rule.
    pub fn without(&self, rule: &str) -> Vec<&str> {
        assert!(
            self.rules.iter().any(|r| r == rule),
            "the recipe has no {rule}: {:?}",
            self.rules
        );
        self.rules().into_iter().filter(|r| *r != rule).collect()
    }
}

impl RedisCluster {
    /// `ACL SETUSER user rules...` on every running node (ACLs are per node: a cluster does not
    /// share them).
    ///
    /// # Errors
    ///
    /// When a node refuses the rules (an unknown command, say) or does not answer.
    pub fn set_user(&self, user: &str, rules: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["ACL", "SETUSER", user];
        args.extend_from_slice(rules);
        for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].answering()) {
            self.cli_ok(i, &args)?;
        }
        Ok(())
    }

    /// The discovery URL (the first node) as `user` with `password`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let scheme = if self.opts.tls { "rediss" } else { "redis" };
        format!("{scheme}://{user}:{password}@{}", self.nodes[0].addr())
    }

    /// What the servers' ACLs refused, from `ACL LOG` of every running node: `(reason,
    /// object, count)`, such as `("command", "strlen", 3)` or `("key", "mmcache:emb:v1:{…}", 1)`
    /// (`reason` is `command`, `key`, `channel` or `auth`), summed over nodes, sorted.
    ///
    /// # Errors
    ///
    /// When a node does not answer.
    pub fn acl_denials(&self) -> anyhow::Result<Vec<(String, String, u64)>> {
        let mut all: Vec<(String, String, u64)> = Vec::new();
        for node in self.nodes.iter().filter(|n| n.answering()) {
            let log = self.query(node.addr(), &redis::cmd("ACL").arg("LOG").clone(), false)?;
            let redis::Value::Array(entries) = log else {
                bail!("ACL LOG answered {log:?}");
            };
            for entry in &entries {
                let (reason, object, count) = acl_log_entry(entry)?;
                match all
                    .iter_mut()
                    .find(|(r, o, _)| *r == reason && *o == object)
                {
                    Some((_, _, total)) => *total += count,
                    None => all.push((reason, object, count)),
                }
            }
        }
        all.sort();
        Ok(all)
    }

    /// How often the ACLs refused `object` (a command such as `strlen`, or `AUTH`... see
    /// [`RedisCluster::acl_denials`]) for `reason`.
    ///
    /// # Errors
    ///
    /// When a node does not answer.
    pub fn acl_denied(&self, reason: &str, object: &str) -> anyhow::Result<u64> {
        Ok(self
            .acl_denials()?
            .into_iter()
            .filter(|(r, o, _)| r == reason && o == object)
            .map(|(_, _, n)| n)
            .sum())
    }

    /// The `field` (`calls`, `rejected_calls`, `failed_calls`) of `command` (`strlen`,
    /// `cluster|slots`) in `INFO commandstats`, summed over the running nodes.
    ///
    /// # Errors
    ///
    /// When a node does not answer.
    pub fn command_stat(&self, command: &str, field: &str) -> anyhow::Result<u64> {
        Ok(self
            .commandstats(field)?
            .into_iter()
            .find_map(|(c, n)| (c == command).then_some(n))
            .unwrap_or(0))
    }

    /// `field` of every command with a non-zero one, summed over the running nodes, sorted.
    fn commandstats(&self, field: &str) -> anyhow::Result<Vec<(String, u64)>> {
        let mut all: Vec<(String, u64)> = Vec::new();
        for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].answering()) {
            let stats = self.cli(i, &["INFO", "commandstats"])?;
            for (command, n) in stats.lines().filter_map(|l| stat(l, field)) {
                match all.iter_mut().find(|(c, _)| *c == command) {
                    Some((_, total)) => *total += n,
                    None => all.push((command, n)),
                }
            }
        }
        all.retain(|(_, n)| *n > 0);
        all.sort();
        Ok(all)
    }
}

/// `(reason, object, count)` of one `ACL LOG` entry (a map, or RESP2's flat field list).
fn acl_log_entry(entry: &redis::Value) -> anyhow::Result<(String, String, u64)> {
    use redis::Value;
    let pairs: Vec<(&Value, &Value)> = match entry {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        other => bail!("ACL LOG entry {other:?}"),
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let field = |name: &str| pairs.iter().find(|(k, _)| text(k) == name).map(|(_, v)| *v);
    let count = match field("count") {
        Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
        other => bail!("ACL LOG entry without a count: {other:?}"),
    };
    let reason = field("reason").map(text).context("no reason")?;
    let object = field("object").map(text).context("no object")?;
    Ok((reason, object, count))
}

/// `cmdstat_strlen:calls=1,usec=2,usec_per_call=2.00,rejected_calls=3,failed_calls=0` with
/// `rejected_calls` → `("strlen", 3)`.
fn stat(line: &str, field: &str) -> Option<(String, u64)> {
    let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
    let n = fields
        .split(',')
        .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))?
        .parse()
        .ok()?;
    Some((name.to_owned(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipe_is_one_line_of_the_doc() {
        let r = parse_recipe("x\n```text\nACL SETUSER w on >pw ~k:* +get\n```\n").unwrap();
        assert_eq!((r.user.as_str(), r.password.as_str()), ("w", "pw"));
        assert_eq!(r.rules(), ["on", ">pw", "~k:*", "+get"]);
        assert_eq!(r.without("+get"), ["on", ">pw", "~k:*"]);
        assert!(parse_recipe("no recipe").is_err());
        assert!(parse_recipe("ACL SETUSER a >p\nACL SETUSER b >p\n").is_err());
        // The real doc parses.
        assert!(acl_recipe().rules.len() > 3);
    }

    #[test]
    fn fields_of_commandstats() {
        let line = "cmdstat_cluster|slots:calls=4,usec=9,usec_per_call=2.25,rejected_calls=2";
        assert_eq!(
            stat(line, "rejected_calls"),
            Some(("cluster|slots".into(), 2))
        );
        assert_eq!(stat(line, "calls"), Some(("cluster|slots".into(), 4)));
        assert_eq!(stat("# Commandstats", "calls"), None);
    }
}
