//! Label values and their encoding in the Prometheus text format.

use super::*;

#[test]
fn methods_map_to_a_bounded_set() {
    assert_eq!(Method::from_name("tools/call"), Method::ToolsCall);
    assert_eq!(Method::from_name("server/discover"), Method::ServerDiscover);
    assert_eq!(Method::from_name("x/evil-unbounded-123"), Method::Other);
    assert_eq!(Method::from_name("other"), Method::Other);
}

#[test]
fn labels_encode_as_snake_case_text() {
    let mut registry = Registry::with_prefix("mrtr");
    let m = Metrics::new(&mut registry);
    m.request(Method::ToolsCall, Outcome::InputRequired);
    m.state_failure(StateFailure::StaleRound);
    m.pool("fixture").ended(SessionEnd::Lost);
    m.listener(Listener::Mcp).shed(Shed::AddressCap);
    let text = encode(&registry);
    assert!(
        text.contains(
            r#"mrtr_downstream_requests_total{method="tools/call",outcome="input_required"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"mrtr_state_failures_total{reason="stale_round"} 1"#));
    assert!(text.contains(r#"mrtr_retries_total{result="rejected",reason="invalid_state"} 1"#));
    assert!(
        text.contains(r#"mrtr_upstream_session_ends_total{backend="fixture",reason="lost"} 1"#)
    );
    assert!(text.contains("# TYPE mrtr_upstream_queue_wait_seconds histogram"));
    assert!(
        text.contains(r#"mrtr_connections_shed_total{listener="mcp",reason="address_cap"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mrtr_connections_shed_total{listener="admin",reason="idle_evicted"} 0"#),
        "the series a listener can move start at 0: {text}"
    );
}
