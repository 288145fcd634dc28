//! `[[backend]]` tables: each kind's settings checked, defaulted, and refused on another kind.

use crate::config::{Authorization, Config, Protocol, Transport};
use std::time::Duration;

#[test]
fn http_backends_are_checked_field_by_field() {
    let http = |extra: &str| {
        Config::parse(
            &format!("[[backend]]\nname = \"h\"\nkind = \"http\"\n{extra}"),
            None,
        )
    };
    let ok = http("url = \"https://mcp.internal:8443/mcp\"\nheaders = { \"X-Team\" = \"a\" }\n")
        .unwrap();
    let Transport::Http(h) = &ok.backends[0].transport else {
        panic!("an http backend")
    };
    assert_eq!(h.authorization, Authorization::Drop);
    assert_eq!(h.connect_timeout, Duration::from_secs(5));
    assert_eq!(h.max_response_head_bytes, 4096);
    assert_eq!(h.headers["x-team"], "a");
    let cases = [
        ("", "backend[0].url"),
        ("url = \"ftp://x/y\"\n", "backend[0].url"),
        (
            "url = \"http://x/mcp\"\ncommand = \"srv\"\n",
            "backend[0].command",
        ),
        (
            "url = \"http://x/mcp\"\nheaders = { \"Mcp-Session-Id\" = \"s\" }\n",
            "backend[0].headers",
        ),
        (
            "url = \"http://x/mcp\"\nauthorization = \"replace\"\n",
            "backend[0].authorization_value",
        ),
        (
            "url = \"http://x/mcp\"\nauthorization = \"forward\"\n",
            "backend[0].authorization",
        ),
        (
            "url = \"http://x/mcp\"\nconnect_timeout = \"0s\"\n",
            "backend[0].connect_timeout",
        ),
        (
            "url = \"http://x/mcp\"\nmax_response_head_bytes = 512\n",
            "backend[0].max_response_head_bytes",
        ),
        (
            "url = \"http://x/mcp\"\nmax_response_head_bytes = 2097152\n",
            "backend[0].max_response_head_bytes",
        ),
        (
            "url = \"http://x/mcp\"\nidle_timeout = \"0s\"\n",
            "backend[0].idle_timeout",
        ),
    ];
    for (extra, field) in cases {
        assert_eq!(http(extra).unwrap_err().field, field, "{extra}");
    }
    // A credential in the URL would not be sent, and is not repeated back.
    let err = http("url = \"http://user:pa55@x/mcp\"\n").unwrap_err();
    assert_eq!(err.field, "backend[0].url");
    assert!(!err.to_string().contains("pa55"), "{err}");
    let err = Config::parse(
        "[principal]\nsource = \"anonymous\"\n[[backend]]\nname = \"h\"\nkind = \"sse\"\nurl = \"http://x/sse\"\nauthorization = \"pass\"\n",
        None,
    )
    .unwrap_err();
    assert_eq!(err.field, "backend[0].authorization");
    let err = Config::parse(
        "[[backend]]\nname = \"s\"\ncommand = \"srv\"\nurl = \"http://x/mcp\"\n",
        None,
    )
    .unwrap_err();
    assert_eq!(err.field, "backend[0].url");
}

#[test]
fn stdio_limits_have_defaults_bounds_and_belong_to_stdio_backends() {
    let parse = |extra: &str| {
        Config::parse(
            &format!("[[backend]]\nname = \"s\"\ncommand = \"srv\"\n{extra}"),
            None,
        )
    };
    let stdio = |c: &Config| match &c.backends[0].transport {
        Transport::Stdio(t) => (t.max_stderr_line_bytes, t.write_queue),
        other => panic!("a stdio backend, not {other:?}"),
    };
    assert_eq!(stdio(&parse("").unwrap()), (16 * 1024, 32));
    let set = parse("max_stderr_line_bytes = 1024\nwrite_queue = 4\n").unwrap();
    assert_eq!(stdio(&set), (1024, 4));
    for (extra, field) in [
        (
            "max_stderr_line_bytes = 10\n",
            "backend[0].max_stderr_line_bytes",
        ),
        (
            "max_stderr_line_bytes = 2097152\n",
            "backend[0].max_stderr_line_bytes",
        ),
        ("write_queue = 0\n", "backend[0].write_queue"),
        ("write_queue = 5000\n", "backend[0].write_queue"),
        // Streams are an http backend's.
        (
            "standalone_stream = false\n",
            "backend[0].standalone_stream",
        ),
        (
            "release_parked_streams = false\n",
            "backend[0].release_parked_streams",
        ),
    ] {
        assert_eq!(parse(extra).unwrap_err().field, field, "{extra}");
    }
    let err = Config::parse(
        "[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"http://x/mcp\"\nwrite_queue = 8\n",
        None,
    )
    .unwrap_err();
    assert_eq!(err.field, "backend[0].command");
    assert!(err.reason.contains("write_queue"), "{err}");
}

#[test]
fn builtin_settings_are_checked_and_only_for_builtin_backends() {
    let parse = |extra: &str| Config::parse(&format!("[[backend]]\nname = \"b\"\n{extra}"), None);
    let ok = parse(
        "kind = \"builtin\"\nbuiltin_protocol = \"2025-06-18\"\nbuiltin_roots_on_init = true\n",
    )
    .unwrap();
    let Transport::Builtin(o) = &ok.backends[0].transport else {
        panic!("a builtin backend")
    };
    assert_eq!(o.protocol.as_deref(), Some("2025-06-18"));
    assert!(o.roots_on_init);
    for extra in [
        "kind = \"builtin\"\nbuiltin_protocol = \"bogus\"\n",
        "command = \"srv\"\nbuiltin_protocol = \"2025-06-18\"\n",
        "command = \"srv\"\nbuiltin_roots_on_init = true\n",
    ] {
        assert_eq!(
            parse(extra).unwrap_err().field,
            "backend[0].builtin_protocol",
            "{extra}"
        );
    }
}

#[test]
fn a_bad_kind_is_blamed_on_kind_whatever_else_is_set() {
    let parse = |extra: &str| Config::parse(&format!("[[backend]]\nname = \"b\"\n{extra}"), None);
    for extra in [
        "kind = \"htpp\"\nurl = \"http://x/mcp\"\n",
        "kind = \"htpp\"\nurl = \"http://x/mcp\"\nstandalone_stream = false\n",
        "kind = \"stdoi\"\ncommand = \"srv\"\n",
        "kind = \"biultin\"\nbuiltin_roots_on_init = true\n",
        "kind = \"HTTP\"\n",
    ] {
        let err = parse(extra).unwrap_err();
        assert_eq!(err.field, "backend[0].kind", "{extra}: {err}");
        assert!(err.reason.contains("expected \"stdio\""), "{err}");
    }
}

#[test]
fn a_principal_takes_a_share_of_the_pool_and_some_is_kept_for_calls_without_input() {
    let parse = |extra: &str| {
        Config::parse(
            &format!("[[backend]]\nname = \"s\"\ncommand = \"srv\"\n{extra}"),
            None,
        )
    };
    let shares = |extra: &str| {
        let b = &parse(extra).unwrap().backends[0];
        (b.pool_max, b.principal_sessions, b.reserved_sessions)
    };
    // A quarter and an eighth of the pool, at least one each, and nothing kept from a pool of
    // one (its one session is all an interactive call could have).
    assert_eq!(shares(""), (16, 4, 2));
    assert_eq!(shares("pool_max = 4\n"), (4, 1, 1));
    assert_eq!(shares("pool_max = 2\n"), (2, 1, 1));
    assert_eq!(shares("pool_max = 1\n"), (1, 1, 0));
    // A default share never exceeds what interactive calls may hold in all.
    assert_eq!(shares("pool_max = 8\nreserved_sessions = 7\n"), (8, 1, 7));
    assert_eq!(
        shares("pool_max = 8\nprincipal_sessions = 6\nreserved_sessions = 2\n"),
        (8, 6, 2)
    );
    assert_eq!(shares("reserved_sessions = 0\n"), (16, 4, 0));
    for (extra, field, says) in [
        (
            "principal_sessions = 0\n",
            "principal_sessions",
            "between 1 and",
        ),
        (
            "pool_max = 4\nprincipal_sessions = 5\n",
            "principal_sessions",
            "(3)",
        ),
        (
            "pool_max = 8\nprincipal_sessions = 8\nreserved_sessions = 1\n",
            "principal_sessions",
            "`reserved_sessions` (7)",
        ),
        (
            "pool_max = 4\nreserved_sessions = 4\n",
            "reserved_sessions",
            "(4)",
        ),
        (
            "pool_max = 1\nreserved_sessions = 1\n",
            "reserved_sessions",
            "less than",
        ),
    ] {
        let err = parse(extra).unwrap_err();
        assert_eq!(err.field, format!("backend[0].{field}"), "{extra}");
        assert!(err.reason.contains(says), "{extra}: {err}");
    }
}

#[test]
fn a_backend_era_is_auto_unless_set_and_2026_only_on_streamable_http_and_stdio() {
    let backend = |lines: &str| Config::parse(&format!("[[backend]]\nname = \"b\"\n{lines}"), None);
    let http = "kind = \"http\"\nurl = \"http://x/mcp\"\n";
    let stdio = "command = \"srv\"\n";
    for kind in [http, stdio] {
        assert_eq!(backend(kind).unwrap().backends[0].protocol, Protocol::Auto);
        for (text, want) in [
            ("legacy", Protocol::Legacy),
            ("auto", Protocol::Auto),
            ("2026-07-28", Protocol::Modern),
        ] {
            let c = backend(&format!("{kind}protocol = \"{text}\"\n")).unwrap();
            assert_eq!(c.backends[0].protocol, want, "{kind}{text}");
        }
        let err = backend(&format!("{kind}protocol = \"2025-11-25\"\n")).unwrap_err();
        assert!(err.to_string().contains("backend[0].protocol"), "{err}");
    }
    // The legacy transports and the built-in legacy server: `auto` is accepted and means legacy.
    for kind in [
        "kind = \"builtin\"\n",
        "kind = \"sse\"\nurl = \"http://x/sse\"\n",
    ] {
        assert!(
            backend(&format!("{kind}protocol = \"auto\"\n")).is_ok(),
            "{kind}"
        );
        let err = backend(&format!("{kind}protocol = \"2026-07-28\"\n")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("backend[0].protocol") && text.contains("kind = \"http\""),
            "{text}"
        );
    }
    // The probe's wait, on any kind, and a 2026-07-28 stdio backend's children.
    let c = backend(&format!("{stdio}probe_timeout = \"3s\"\nchildren = 4\n")).unwrap();
    let b = &c.backends[0];
    assert_eq!(b.probe_timeout, std::time::Duration::from_secs(3));
    let crate::config::Transport::Stdio(s) = &b.transport else {
        panic!("a stdio backend")
    };
    assert_eq!(s.children, 4);
    assert_eq!(
        backend(http).unwrap().backends[0].probe_timeout,
        crate::config::DEFAULT_PROBE_TIMEOUT
    );
    for (lines, field) in [
        (format!("{stdio}children = 0\n"), "children"),
        (format!("{stdio}children = 65\n"), "children"),
        (format!("{http}children = 2\n"), "command"),
        (format!("{stdio}probe_timeout = \"1ms\"\n"), "probe_timeout"),
    ] {
        let err = backend(&lines).unwrap_err();
        assert_eq!(err.field, format!("backend[0].{field}"), "{lines}");
    }
    // `protocol_version` stays the legacy version `initialize` asks for, and says where the
    // 2026-07-28 setting is.
    let err = backend(&format!("{http}protocol_version = \"2026-07-28\"\n")).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("backend[0].protocol_version") && text.contains("protocol = \"2026-07-28\""),
        "{text}"
    );
}
