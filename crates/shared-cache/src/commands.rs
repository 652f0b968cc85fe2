//! The commands each operation sends, one list per operation (a script's own calls included):
//! a denial of one of them holds back every operation that sends it on that key space (see
//! [`crate::DENIED_COOLDOWN`]), and `mmcache doctor` names them. A command a worker starts to
//! send goes here and on the ACL recipe's line of docs/deployment.md, which the ACL tests run.

/// A read: `STRLEN` and `GETRANGE key 0 <step>`, pipelined (one round trip).
pub const READ: &[&str] = &["STRLEN", "GETRANGE"];
/// A read's length alone (when the read memory has no room for a first step).
pub const STRLEN: &[&str] = &["STRLEN"];
/// A write (`SET … EX`, `SET … PX`) or a lease (`SET … NX PX`).
pub const SET: &[&str] = &["SET"];
/// A delete (a bad value, or the doctor's own key).
pub const DEL: &[&str] = &["DEL"];
/// A lease's release: `EVAL` of a compare-and-delete script that calls `GET` and `DEL`.
pub const RELEASE: &[&str] = &["EVAL", "GET", "DEL"];
/// A connect, after `AUTH`: the client's discovery reads the slot map.
pub const CONNECT: &[&str] = &["CLUSTER SLOTS"];
