//! The library's metrics hook (`rmcast::metrics`, feature `metrics`): what a library user
//! registers in their own `prometheus_client` registry moves when messages flow, and a group
//! whose handles are gone leaves the exposition.

mod common;

use common::*;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use rmcast::{EngineChoice, OpenMode};
use std::time::Duration;

/// The value of the sample `name` whose labels contain every one of `labels` (`key="value"`,
/// comma-separated), if any.
fn value(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.split(',').all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
}

fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text
}

#[test]
fn registered_metrics_move_when_messages_flow() {
    let seq = EngineChoice::named("sequencer").unwrap();
    let name = unique_name("metrics");
    let (a, b) = (node(301), node(302));
    let mut ga = a.open_group(cfg(&name, &seq, OpenMode::Create)).unwrap();
    let mut gb = b.open_group(cfg(&name, &seq, OpenMode::Join)).unwrap();
    let (mut sa, mut sb) = (Seen::default(), Seen::default());
    recv_until(&mut gb, &mut sb, Duration::from_secs(10), view_has(2));

    // One registry for both nodes and both members, as a process with several would have.
    let mut registry = Registry::default();
    let metrics = rmcast::metrics::register(&mut registry, &a);
    metrics.add_node(&b);
    metrics.add_group(&ga);
    metrics.add_group(&gb);
    let before = scrape(&registry);
    for family in [
        "rmcast_delivered",
        "rmcast_node_datagrams_sent",
        "rmcast_send_latency_seconds",
        "rmcast_members",
    ] {
        // Described once, however many sources it lists.
        let help = format!("# HELP {family} ");
        assert_eq!(before.matches(&help).count(), 1, "{family}: {before}");
    }
    let me_a = "member=\"301\"";
    assert_eq!(
        value(&before, "rmcast_members", me_a),
        Some(2.0),
        "{before}"
    );
    let sent_before = value(&before, "rmcast_node_datagrams_sent_total", "node=\"301\"").unwrap();
    let timed_before = value(&before, "rmcast_send_latency_seconds_count", me_a).unwrap();

    for i in 0..50u32 {
        ga.send(i.to_be_bytes().to_vec()).unwrap();
    }
    recv_until(&mut gb, &mut sb, Duration::from_secs(10), |s| {
        s.deliveries.len() >= 50
    });
    recv_until(&mut ga, &mut sa, Duration::from_secs(10), |s| {
        s.deliveries.len() >= 50
    });

    let after = scrape(&registry);
    let me_b = "member=\"302\"";
    assert!(
        value(&after, "rmcast_delivered_total", me_b).unwrap() >= 50.0,
        "{after}"
    );
    assert!(
        value(&after, "rmcast_submitted_total", me_a).unwrap() >= 50.0,
        "{after}"
    );
    let sent_after = value(&after, "rmcast_node_datagrams_sent_total", "node=\"301\"").unwrap();
    assert!(sent_after > sent_before, "{sent_before} -> {sent_after}");
    // Every blocking send completed, so every one was timed.
    let timed_after = value(&after, "rmcast_send_latency_seconds_count", me_a).unwrap();
    assert!(
        timed_after >= timed_before + 50.0,
        "{timed_before} -> {timed_after}"
    );
    assert!(value(&after, "rmcast_send_latency_seconds_sum", me_a).unwrap() > 0.0);
    let inf = value(
        &after,
        "rmcast_send_latency_seconds_bucket",
        &format!("{me_a},le=\"+Inf\""),
    );
    assert_eq!(inf, Some(timed_after), "{after}");
    // The library's own reading agrees with the exposition.
    assert_eq!(ga.send_latency().count as f64, timed_after);

    // Member b leaves and drops its handles: it is no longer listed.
    gb.leave().unwrap();
    drop(gb);
    let gone = scrape(&registry);
    assert_eq!(value(&gone, "rmcast_delivered_total", me_b), None, "{gone}");
    assert!(
        value(&gone, "rmcast_delivered_total", me_a).is_some(),
        "{gone}"
    );
    ga.leave().unwrap();
}
