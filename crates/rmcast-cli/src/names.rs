//! What people type and read about a group: its name on the command line, and lists of its
//! members' ids in what the commands print. Every command takes these from here.

use rmcast_proto::NodeId;

/// A group name: anything but empty (or blank).
pub fn parse_group_name(name: &str) -> Result<String, String> {
    if name.trim().is_empty() {
        return Err("a group name must not be empty".into());
    }
    Ok(name.to_string())
}

/// A list of node ids for people: `1, 2, 3`, or `nobody`.
pub fn id_list(ids: &[NodeId]) -> String {
    if ids.is_empty() {
        return "nobody".to_string();
    }
    ids.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
