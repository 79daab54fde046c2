//! The async open takes no thread of its own: the I/O thread completes its future.

mod common;

use common::unique_name;
use rmcast::{GroupConfig, GroupEvent, Node, NodeConfig, OpenMode};
use std::time::Duration;

/// Threads of this process now (Linux: one entry per thread in /proc/self/task).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// 200 opens awaited together on one current-thread runtime all finish, each with its own
/// group, and the process gains no thread per open while they wait: they join first (every
/// one pending for the join timeout, alone), then create their group.
#[test]
fn two_hundred_async_opens_take_no_thread_each() {
    const OPENS: usize = 200;
    let node = std::sync::Arc::new(Node::new(NodeConfig::default()).expect("node starts"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let tag = unique_name("async-open");
    let before = threads();
    let (waiting, groups) = rt.block_on(async {
        let tasks: Vec<_> = (0..OPENS)
            .map(|i| {
                let node = node.clone();
                let cfg = GroupConfig::new(format!("{tag}-{i}"))
                    .mode(OpenMode::JoinOrCreate)
                    .join_timeout(Duration::from_millis(500));
                tokio::spawn(async move { node.open_group_async(cfg).await })
            })
            .collect();
        // Every task has run up to its await (a current-thread runtime polls them in turn), so
        // every open is with the I/O thread now, and waiting.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let waiting = threads();
        let mut groups = Vec::with_capacity(OPENS);
        for t in tasks {
            groups.push(t.await.expect("task").expect("open"));
        }
        (waiting, groups)
    });
    assert!(
        waiting <= before + 3,
        "threads grew from {before} to {waiting} while {OPENS} opens waited"
    );
    assert_eq!(groups.len(), OPENS);
    for mut g in groups {
        assert!(g.created(), "nobody else is in {}: created alone", g.name());
        assert!(
            matches!(g.try_recv(), Ok(Some(GroupEvent::View(v))) if v.members.len() == 1),
            "the first event is the view of one"
        );
    }
}
