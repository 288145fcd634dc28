//! Hostile input against every parser that reads what clients and backends send: generated
//! cases (proptest) instead of a fuzzer, so they run on stable in `cargo test`. Each property
//! holds for all input, not for the examples the other tests pick: no panic, the nesting limit
//! exactly where the tree says, a message read back as it was written, any altered or cut
//! requestState or hop MAC refused, `_meta` and its trace context read or refused, SSE read
//! the same however the bytes are split, and any config value refused with a reason or taken.

use futures_util::StreamExt;
use mrtr_gateway::config::Config;
use mrtr_gateway::jsonrpc::{self, FrameError};
use mrtr_gateway::protocol::meta::{self, RequestMeta};
use mrtr_gateway::seal::{self, Claims, Key, KeyRing, ParkId};
use mrtr_gateway::sse;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value without floats (whose text form need not read back to the same bits), with
/// strings of any characters: quotes, backslashes, control characters, astral planes.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(10, 96, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// How deeply `value` nests arrays and objects: 0 for a scalar, 1 for `{}`.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn id() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0..i64::MAX).prop_map(Value::from),
        any::<String>().prop_map(Value::String)
    ]
}

/// A request, a notification, a response with a result or one with an error, carrying `v` in
/// its params, result or error data.
fn message() -> impl Strategy<Value = Value> {
    (id(), any::<String>(), json_value(), any::<i64>(), 0..4u8).prop_map(
        |(id, text, v, code, kind)| {
            let params = Value::Object(Map::from_iter([("arguments".to_owned(), v.clone())]));
            match kind {
                0 => json!({"jsonrpc": "2.0", "id": id, "method": text, "params": params}),
                1 => json!({"jsonrpc": "2.0", "method": text, "params": params}),
                2 => json!({"jsonrpc": "2.0", "id": id, "result": v}),
                _ => json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": code, "message": text, "data": v}}),
            }
        },
    )
}

proptest! {
    #[test]
    fn any_bytes_are_refused_or_read_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = jsonrpc::parse(&bytes, 64);
        let _ = jsonrpc::parse_many(&bytes, 64);
        let _ = jsonrpc::check_depth(&bytes, 64);
    }

    #[test]
    fn a_message_is_read_back_as_it_was_written(msg in message()) {
        let text = serde_json::to_vec(&msg).unwrap();
        let read = jsonrpc::parse_many(&text, 127).expect("a valid message");
        prop_assert_eq!(read.len(), 1);
        let back = read.into_iter().next().unwrap().into_value();
        // An error's `data` of null is read as no data: JSON-RPC makes `data` optional, and a
        // null carries nothing, so it is not passed on.
        let mut msg = msg;
        if let Some(error) = msg.get_mut("error").and_then(Value::as_object_mut) {
            error.retain(|k, v| k != "data" || !v.is_null());
        }
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn a_message_is_too_deep_exactly_when_its_tree_is(msg in message(), max in 1usize..14) {
        let text = serde_json::to_vec(&msg).unwrap();
        let too_deep = depth(&msg) > max;
        let read = jsonrpc::parse_many(&text, max);
        prop_assert_eq!(
            matches!(read, Err(FrameError::TooDeep(_))),
            too_deep,
            "depth {} against {}: {:?}", depth(&msg), max, read
        );
        prop_assert_eq!(jsonrpc::check_depth(&text, max).is_err(), too_deep);
    }

    #[test]
    fn a_cut_message_is_refused_with_the_nesting_it_shows(msg in message(), cut in any::<prop::sample::Index>(), max in 1usize..14) {
        // Cut anywhere: the text no longer parses, and the scan of what is left decides
        // between too deep and a parse error.
        let text = serde_json::to_vec(&msg).unwrap();
        let cut = &text[..cut.index(text.len())];
        let read = jsonrpc::parse_many(cut, max);
        prop_assert!(read.is_err());
        let too_deep = jsonrpc::check_depth(cut, max).is_err();
        prop_assert_eq!(matches!(read, Err(FrameError::TooDeep(_))), too_deep, "{:?}", read);
    }
}

fn ring() -> KeyRing {
    KeyRing::new(vec![Key::new("k1", &[7u8; 32]).unwrap()]).unwrap()
}

fn claims(outstanding: Vec<String>, round: u32) -> Claims {
    Claims {
        park: ParkId::random(),
        owner: "local".into(),
        principal: seal::digest(b"Bearer someone"),
        request: seal::digest(b"tools/call ask_form {}"),
        round,
        expires_at_ms: 1_800_000_000_000,
        outstanding,
        owner_addr: None,
        replay: None,
    }
}

const STATE_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ";

proptest! {
    #[test]
    fn a_state_the_gateway_did_not_seal_is_refused(
        token in prop_oneof![any::<String>(), "v1\\.k1\\.[A-Za-z0-9_-]{0,300}", "v1\\.[a-z0-9]{1,8}\\.[A-Za-z0-9_-]{20,200}"]
    ) {
        prop_assert!(ring().open(&token).is_err());
    }

    #[test]
    fn a_state_with_any_one_character_changed_is_refused(
        keys in prop::collection::vec("[a-z]{1,12}-[0-9]{1,3}", 0..4),
        round in 1u32..100,
        at in any::<prop::sample::Index>(),
        with in prop::sample::select(STATE_CHARS),
    ) {
        let ring = ring();
        let sealed = claims(keys, round);
        let token = ring.seal(&sealed);
        prop_assert_eq!(ring.open(&token).expect("its own seal opens").round, round);
        let mut bytes = token.clone().into_bytes();
        let i = at.index(bytes.len());
        prop_assume!(bytes[i] != with);
        bytes[i] = with;
        let altered = String::from_utf8(bytes).unwrap();
        prop_assert!(ring.open(&altered).is_err(), "accepted {} altered at {}", altered, i);
    }

    #[test]
    fn a_state_cut_short_or_extended_is_refused(
        cut in any::<prop::sample::Index>(),
        tail in "[A-Za-z0-9_-]{1,8}",
    ) {
        let ring = ring();
        let token = ring.seal(&claims(vec!["elicitation-1".into()], 1));
        let short = &token[..cut.index(token.len())];
        prop_assert!(ring.open(short).is_err());
        let long = format!("{token}{tail}");
        prop_assert!(ring.open(&long).is_err());
    }
}

proptest! {
    #[test]
    fn a_hop_with_any_byte_changed_fails_its_mac(
        data in prop::collection::vec(any::<u8>(), 0..256),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        in_tag in any::<bool>(),
    ) {
        let ring = ring();
        let tag = ring.mac(&data);
        prop_assert!(ring.verify_mac(&data, &tag));
        let other = KeyRing::new(vec![Key::new("k2", &[8u8; 32]).unwrap()]).unwrap();
        prop_assert!(!other.verify_mac(&data, &tag), "another key's ring");
        prop_assert!(!ring.verify_mac(&data, &tag[..31]), "a cut tag");
        let (mut data, mut tag) = (data, tag.to_vec());
        let changed = if in_tag || data.is_empty() { &mut tag } else { &mut data };
        let i = at.index(changed.len());
        changed[i] ^= flip;
        prop_assert!(!ring.verify_mac(&data, &tag));
    }
}

/// Decodes `chunks` as one SSE body, bounded at `max` bytes per event.
fn decode(chunks: Vec<Vec<u8>>, max: usize) -> Vec<Result<sse::Event, sse::DecodeError>> {
    let body = futures_util::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from(c))),
    );
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(sse::decode(body, max).collect())
}

/// Splits `bytes` at the given cut points.
fn split(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

proptest! {
    #[test]
    fn sse_reads_the_same_however_the_bytes_are_split(
        events in prop::collection::vec(json_value(), 1..6),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let text: String = events.iter().map(|v| sse::encode("message", v)).collect();
        let whole = decode(vec![text.clone().into_bytes()], 1 << 20);
        let pieces = decode(split(text.as_bytes(), &cuts), 1 << 20);
        prop_assert_eq!(&pieces, &whole);
        let read: Vec<Value> = whole
            .into_iter()
            .map(|e| serde_json::from_str(&e.expect("an event").data).unwrap())
            .collect();
        prop_assert_eq!(read, events);
    }

    #[test]
    fn sse_never_holds_an_event_over_its_bound(
        bytes in prop::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), any::<u8>()], 0..2048),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        max in 16usize..256,
    ) {
        for item in decode(split(&bytes, &cuts), max) {
            match item {
                Ok(ev) => prop_assert!(ev.data.len() <= max, "{} bytes of data", ev.data.len()),
                Err(sse::DecodeError::TooLarge(limit)) => prop_assert_eq!(limit, max),
                Err(_) => {}
            }
        }
    }
}

/// W3C `traceparent` texts: well formed, nearly so, and anything.
fn traceparent() -> impl Strategy<Value = String> {
    prop_oneof![
        "00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}",
        "[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[ -~]{0,8})?",
        "[0-9a-fA-F-]{50,60}",
        any::<String>(),
    ]
}

/// What the W3C Trace Context spec accepts, written out independently of the gateway's check.
fn w3c_valid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    if parts.len() < 4 {
        return false;
    }
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    };
    let zero = |p: &str| p.chars().all(|c| c == '0');
    hex(parts[0], 2)
        && parts[0] != "ff"
        && (parts.len() == 4 || parts[0] != "00")
        && hex(parts[1], 32)
        && !zero(parts[1])
        && hex(parts[2], 16)
        && !zero(parts[2])
        && hex(parts[3], 2)
}

proptest! {
    #[test]
    fn any_params_are_refused_or_read_never_a_panic(params in json_value()) {
        let _ = RequestMeta::from_params(Some(&params));
        let wrapped = json!({"_meta": params});
        let _ = RequestMeta::from_params(Some(&wrapped));
    }

    #[test]
    fn a_traceparent_is_kept_exactly_when_it_is_well_formed(
        tp in traceparent(),
        state in prop::option::of(any::<String>()),
    ) {
        let mut m = Map::new();
        m.insert(meta::PROTOCOL_VERSION.into(), json!("2026-07-28"));
        m.insert(meta::CLIENT_CAPABILITIES.into(), json!({}));
        m.insert(meta::TRACEPARENT.into(), json!(tp));
        if let Some(state) = &state {
            m.insert("tracestate".into(), json!(state));
        }
        let read = RequestMeta::from_params(Some(&json!({"_meta": m}))).expect("valid _meta");
        prop_assert_eq!(read.trace.is_some(), w3c_valid(&tp), "{:?}", tp);
        if let Some(trace) = read.trace {
            prop_assert_eq!(trace.trace_id(), tp.split('-').nth(1).unwrap());
            prop_assert_eq!(trace.tracestate, state);
        }
    }
}

/// A TOML value of any kind a config key might be given by mistake.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        "[0-9]{1,20}(ns|us|ms|s|m|h|d|w|y)?".prop_map(|d| format!("{d:?}")),
        any::<String>().prop_map(|s| format!("{s:?}")),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
    ]
}

proptest! {
    #[test]
    fn any_config_text_is_refused_with_a_reason_or_taken(text in any::<String>()) {
        if let Err(e) = Config::parse(&text, None) {
            prop_assert!(!e.reason.is_empty());
        }
    }

    #[test]
    fn any_value_for_a_limit_is_refused_with_a_reason_or_taken(
        key in prop::sample::select(vec![
            ("server", "max_connections"), ("server", "header_timeout"),
            ("server", "max_connections_per_address"), ("admin", "header_timeout"),
            ("server", "worker_threads"), ("state", "park_ttl"),
            ("state", "coalesce_window"), ("limits", "max_body_bytes"),
            ("limits", "max_json_depth"), ("limits", "max_parked_total"),
            ("limits", "max_parked_per_principal"), ("limits", "request_timeout"),
            ("limits", "queue_wait"), ("fleet", "max_transcript_bytes"),
        ]),
        value in toml_value(),
    ) {
        let (table, name) = key;
        let text = format!(
            "[{table}]\n{name} = {value}\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\n"
        );
        if let Err(e) = Config::parse(&text, None) {
            prop_assert!(e.to_string().contains(name), "{} = {}: {}", name, value, e);
        }
    }
}
