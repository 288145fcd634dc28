//! The message model on hand-written inputs: shapes, ids, nesting limits, and results kept
//! and rewritten as they were written.

use super::*;
use serde_json::json;

#[test]
fn classifies_requests_notifications_and_responses() {
    let req = parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{}}"#, 8).unwrap();
    assert!(matches!(
        req,
        Message::Request {
            id: Id::Number(1),
            ..
        }
    ));
    let note = parse(br#"{"jsonrpc":"2.0","method":"n"}"#, 8).unwrap();
    assert!(matches!(note, Message::Notification { .. }));
    let resp = parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#, 8).unwrap();
    assert!(matches!(resp, Message::Response { outcome: Ok(_), .. }));
    let err = parse(
        br#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"x"}}"#,
        8,
    )
    .unwrap();
    assert!(matches!(
        err,
        Message::Response {
            outcome: Err(_),
            ..
        }
    ));
}

#[test]
fn rejects_wrong_shapes_with_invalid_request() {
    for bad in [
        &br#"{"id":1,"method":"m"}"#[..],
        br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":3}"#,
        br#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
        br#"{"jsonrpc":"2.0","id":1}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#,
        br#"[1]"#,
        br#""str""#,
    ] {
        let err = parse(bad, 8).unwrap_err();
        assert_eq!(
            err.code(),
            INVALID_REQUEST,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn integer_ids_across_64_bits_echo_back_unchanged() {
    for text in [
        "-9223372036854775808",
        "0",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{text},"method":"m"}}"#);
        let Message::Request { id, .. } = parse(body.as_bytes(), 8).unwrap() else {
            panic!("{text}: not a request");
        };
        assert_eq!(id.to_string(), text);
        let reply = serde_json::to_string(&response(Some(&id), Ok(json!({})))).unwrap();
        assert!(reply.contains(&format!(r#""id":{text}"#)), "{reply}");
    }
    // Each value has one form, so an id read back from a backend's answer finds its call.
    let high: Id = serde_json::from_str("9223372036854775808").unwrap();
    assert_eq!(high, Id::Unsigned(1 << 63));
    assert_eq!(serde_json::from_str::<Id>("7").unwrap(), Id::Number(7));
    for bad in ["1.5", "1e3", "18446744073709551616", "-9223372036854775809"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{bad},"method":"m"}}"#);
        let err = parse(body.as_bytes(), 8).unwrap_err();
        assert_eq!(err.code(), INVALID_REQUEST, "{bad}");
        assert!(err.to_string().contains("64 bits"), "{bad}: {err}");
    }
}

#[test]
fn backend_bodies_may_be_batches() {
    let many = parse_many(
        br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"n"}]"#,
        8,
    )
    .unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(
        parse_many(br#"{"jsonrpc":"2.0","method":"n"}"#, 8)
            .unwrap()
            .len(),
        1
    );
    assert!(parse_many(b"[]", 8).is_err());
    assert!(parse_many(b"<html>", 8).is_err());
}

#[test]
fn malformed_json_is_a_parse_error() {
    assert_eq!(parse(b"{nope", 8).unwrap_err().code(), PARSE_ERROR);
    let not_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\xff\"}";
    let err = parse(not_utf8, 8).unwrap_err();
    assert!(
        matches!(&err, FrameError::Parse(m) if m.contains("UTF-8")),
        "{err:?}"
    );
    let deep = b"{\"a\":[[[[\"\xff\"]]]]}";
    assert_eq!(parse(deep, 3).unwrap_err(), FrameError::TooDeep(3));
}

#[test]
fn parsed_messages_are_held_to_the_nesting_limit() {
    // A request whose params nest `n` levels deep: the message itself is one more.
    let request = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}{}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert!(parse(request(7).as_bytes(), 8).is_ok());
    assert_eq!(
        parse(request(8).as_bytes(), 8).unwrap_err(),
        FrameError::TooDeep(8)
    );
    assert_eq!(
        parse_many(request(8).as_bytes(), 8).unwrap_err(),
        FrameError::TooDeep(8)
    );
    // At the highest limit a configuration may set, and far past the parser's own ceiling.
    let max = crate::config::MAX_JSON_DEPTH;
    assert!(parse(request(max - 1).as_bytes(), max).is_ok());
    for n in [max, 100_000] {
        assert_eq!(
            parse(request(n).as_bytes(), max).unwrap_err(),
            FrameError::TooDeep(max)
        );
    }
    // Too deep and malformed: too deep is what is said; malformed and shallow: a parse error.
    let deep_and_broken = format!(r#"{{"a":{}"#, "[".repeat(20));
    assert_eq!(
        parse(deep_and_broken.as_bytes(), 8).unwrap_err(),
        FrameError::TooDeep(8)
    );
    assert!(matches!(
        parse(br#"{"a":[[["#, 8).unwrap_err(),
        FrameError::Parse(_)
    ));
    // Brackets inside strings are not nesting.
    let quoted = format!(
        r#"{{"jsonrpc":"2.0","method":"m","params":["{}"]}}"#,
        "[".repeat(50)
    );
    assert!(parse(quoted.as_bytes(), 2).is_ok());
}

fn result_of(text: &str) -> Raw {
    let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{text}}}"#);
    match parse(msg.as_bytes(), 16).unwrap() {
        Message::Response {
            outcome: Ok(raw), ..
        } => raw,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_result_is_kept_as_it_was_written() {
    // Spacing, order, escapes and numbers a tree would change (a 23-digit integer would
    // become a float) all stay.
    let text = "{ \"z\": 123456789012345678901234,\n  \"a\": [1.50, \"\\u00e9\"] }";
    assert_eq!(result_of(text).get(), text);
    // A later duplicate of a member wins, as in a map.
    let twice = r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"result":{"b":2}}"#;
    match parse(twice.as_bytes(), 8).unwrap() {
        Message::Response {
            outcome: Ok(raw), ..
        } => assert_eq!(raw.get(), r#"{"b":2}"#),
        other => panic!("{other:?}"),
    }
}

#[test]
fn results_and_unknown_members_are_held_to_the_nesting_limit() {
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let response = |member: &str, n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"{member}":{},"result":{{}}}}"#,
            nested(n)
        )
    };
    // The message is one level, its result or other member the rest.
    for member in ["result", "extra"] {
        let within = if member == "result" {
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, nested(7))
        } else {
            response(member, 7)
        };
        assert!(parse(within.as_bytes(), 8).is_ok(), "{member}");
        let deep = if member == "result" {
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, nested(8))
        } else {
            response(member, 8)
        };
        assert_eq!(
            parse(deep.as_bytes(), 8).unwrap_err(),
            FrameError::TooDeep(8),
            "{member}"
        );
    }
    // In a batch, one more level.
    let batch = |n: usize| format!(r#"[{{"jsonrpc":"2.0","id":1,"result":{}}}]"#, nested(n));
    assert_eq!(parse_many(batch(6).as_bytes(), 8).unwrap().len(), 1);
    assert_eq!(
        parse_many(batch(7).as_bytes(), 8).unwrap_err(),
        FrameError::TooDeep(8)
    );
    // A batch element that is not a message is refused as before.
    assert!(matches!(
        parse_many(br#"[{"jsonrpc":"2.0","method":"n"}, 3]"#, 8).unwrap_err(),
        FrameError::Shape(_)
    ));
}

#[test]
fn members_are_set_on_a_result_as_written() {
    let set = [("resultType", "\"complete\""), ("ttlMs", "0")];
    let cases = [
        (r#"{"a":1}"#, r#"{"a":1,"resultType":"complete","ttlMs":0}"#),
        ("{ }", r#"{"resultType":"complete","ttlMs":0}"#),
        (
            "{ \"a\" : [ 1 ],\n \"b\": {} }",
            "{\"a\" : [ 1 ],\n \"b\": {},\"resultType\":\"complete\",\"ttlMs\":0}",
        ),
        // A member of the same name is replaced, however its name is written.
        (
            r#"{"resultType":"x","b":[1],"ttlMs":5}"#,
            r#"{"b":[1],"resultType":"complete","ttlMs":0}"#,
        ),
        (
            r#"{"result\u0054ype":"x","q\"uote":2}"#,
            r#"{"q\"uote":2,"resultType":"complete","ttlMs":0}"#,
        ),
        // A name that only occurs inside a value is left where it is.
        (
            r#"{"note":"resultType"}"#,
            r#"{"note":"resultType","resultType":"complete","ttlMs":0}"#,
        ),
    ];
    for (text, want) in cases {
        let got = result_of(text).with_members(&set).unwrap();
        assert_eq!(got, want, "{text}");
        let _: Value = serde_json::from_str(&got).unwrap();
    }
    for not_an_object in ["[1]", "\"s\"", "3", "null"] {
        assert_eq!(result_of(not_an_object).with_members(&set), None);
    }
}

#[test]
fn an_entry_goes_into_a_result_s_meta_or_a_new_one() {
    let set = [("resultType", "\"complete\"")];
    let entry = ("io.x/info", r#"{"name":"s"}"#);
    let cases = [
        (
            r#"{"a":1}"#,
            r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
        ),
        (
            "{}",
            r#"{"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
        ),
        // Added to the result's own `_meta`, its members kept as written.
        (
            r#"{"_meta":{ "k" : [1] },"a":1}"#,
            r#"{"a":1,"resultType":"complete","_meta":{ "k" : [1],"io.x/info":{"name":"s"}}}"#,
        ),
        (
            r#"{"_meta":{ },"a":1}"#,
            r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
        ),
        // However the name is written.
        (
            r#"{"\u005fmeta":{"k":1}}"#,
            r#"{"resultType":"complete","_meta":{"k":1,"io.x/info":{"name":"s"}}}"#,
        ),
        // The name only in a value: a new `_meta`.
        (
            r#"{"note":"_meta"}"#,
            r#"{"note":"_meta","resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
        ),
        // A `_meta` that has the entry already, or is not an object, is left as it is.
        (
            r#"{"_meta":{"io.x/info":{"name":"own"}}}"#,
            r#"{"_meta":{"io.x/info":{"name":"own"}},"resultType":"complete"}"#,
        ),
        (r#"{"_meta":3}"#, r#"{"_meta":3,"resultType":"complete"}"#),
        // `null` is no `_meta`: a new one in its place.
        (
            r#"{"_meta":null,"a":1}"#,
            r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
        ),
        // Of several, the last is the one a parser reads: the entry joins it.
        (
            r#"{"_meta":{"a":1},"_meta":{"b":2}}"#,
            r#"{"resultType":"complete","_meta":{"b":2,"io.x/info":{"name":"s"}}}"#,
        ),
    ];
    for (text, want) in cases {
        let got = result_of(text).with_members_and_meta(&set, entry).unwrap();
        assert_eq!(got, want, "{text}");
        let _: Value = serde_json::from_str(&got).unwrap();
    }
    for not_an_object in ["[1]", "\"_meta\"", "3"] {
        assert_eq!(
            result_of(not_an_object).with_members_and_meta(&set, entry),
            None
        );
    }
}

#[test]
fn a_response_is_written_with_its_result_as_it_is() {
    let id = Id::Number(7);
    let text = Payload::Text("{\"a\":\n[1]}".into());
    let tree = Payload::Value(json!({"b": 2}));
    let error = ErrorObject::new(INVALID_PARAMS, "no");
    let written = |o: Result<Payload, ErrorObject>| {
        serde_json::from_slice::<Value>(&response_text(Some(&id), &o)).unwrap()
    };
    assert_eq!(
        written(Ok(text)),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"a": [1]}})
    );
    assert_eq!(
        written(Ok(tree)),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"b": 2}})
    );
    assert_eq!(
        written(Err(error)),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": INVALID_PARAMS, "message": "no"}})
    );
    let unknown = response_text(None, &Err(ErrorObject::new(PARSE_ERROR, "x")));
    assert!(unknown.starts_with(br#"{"jsonrpc":"2.0","error""#));
    let unknown = response(None, Err(ErrorObject::new(PARSE_ERROR, "x")));
    assert!(unknown.get("id").is_none(), "{unknown}");
}

#[test]
fn a_request_written_from_its_parts_reads_back_as_the_message() {
    let params = json!({"name": "t\"\n", "arguments": {"b": [1, null]}});
    for (id, params) in [
        (Id::Number(3), Some(&params)),
        (Id::String("a\"b".into()), None),
    ] {
        let text = request_text(&id, "tools/call", params);
        let expected = Message::Request {
            id,
            method: "tools/call".into(),
            params: params.cloned(),
        };
        assert_eq!(parse(&text, 64), Ok(expected));
    }
}

#[test]
fn nesting_beyond_the_limit_is_refused_before_parsing() {
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(
        check_depth(deep.as_bytes(), 64),
        Err(FrameError::TooDeep(64))
    );
    assert!(check_depth(deep.as_bytes(), 100).is_ok());
    // brackets inside strings do not count
    assert!(check_depth(br#"{"a":"[[[[[[[[\"[[[["}"#, 2).is_ok());
}
