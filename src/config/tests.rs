//! Whole configs through `Config::parse`: the defaults, errors that name their field, the
//! `[fleet]` section, the listeners against each other, keys from the environment and what
//! `check` prints. The `[[backend]]` tables are tested in `backend`, their TLS files in `tls`,
//! whether a stdio backend's program can run in `host`, their HTTP+SSE face in `legacy_sse`.

mod backend;
mod host;
mod legacy_sse;
mod tls;

use super::describe::{bytes, duration};
use super::{Config, Policy, PrincipalSource};
use crate::seal::Key;
use std::time::Duration;

const MINIMAL: &str = "[[backend]]\nname = \"b\"\ncommand = \"server\"\n";

#[test]
fn a_minimal_config_gets_safe_defaults() {
    let c = Config::parse(MINIMAL, None).unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.backends[0].path, "/mcp");
    assert_eq!(c.limits.max_body_bytes, 1 << 20);
    assert!(c.state.ephemeral);
    assert_eq!(c.principal, PrincipalSource::Authorization);
    assert_eq!(c.admin.listen, None, "no admin listener unless asked for");
    assert_eq!(c.server.header_timeout, Duration::from_secs(30));
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(c.server.worker_threads, cpus, "one worker per usable CPU");
    let one = Config::parse(&format!("[server]\nworker_threads = 1\n{MINIMAL}"), None);
    assert_eq!(one.unwrap().server.worker_threads, 1);
    let c = Config::parse(
        &format!("[admin]\nlisten = \"127.0.0.1:9090\"\n{MINIMAL}"),
        None,
    )
    .unwrap();
    assert_eq!(c.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
    assert!(
        c.backends[0].server_info,
        "results carry serverInfo unless told not to"
    );
    assert!(!c.describe().contains("serverInfo"));
    let off = Config::parse(&format!("{MINIMAL}server_info = false\n"), None).unwrap();
    assert!(!off.backends[0].server_info);
    assert!(off.describe().contains("serverInfo not passed on"));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        ("[server]\nlisten = \"nope\"\n", "server.listen"),
        ("[limits]\nmax_body_bytes = 0\n", "limits.max_body_bytes"),
        ("[principal]\nsource = \"header\"\n", "principal.header"),
        ("[state]\npark_ttl = \"0s\"\n", "state.park_ttl"),
        ("[admin]\nlisten = \"9090\"\n", "admin.listen"),
        ("[server]\nworker_threads = 0\n", "server.worker_threads"),
        (
            "[server]\nheader_timeout = \"0s\"\n",
            "server.header_timeout",
        ),
        (
            "[server]\nworker_threads = 100000\n",
            "server.worker_threads",
        ),
        (
            "[state]\nkeys = [{ id = \"k\", secret = \"short\" }]\n",
            "state.keys[0]",
        ),
        // A misspelt level would turn every log of the gateway off.
        ("[log]\nlevel = \"verbose\"\n", "log.level"),
        ("[log]\nlevel = \"info,hyper\"\n", "log.level"),
        ("[log]\nlevel = \"mrtr_gateway=loud\"\n", "log.level"),
    ];
    for (text, field) in cases {
        let err = Config::parse(&format!("{text}{MINIMAL}"), None).unwrap_err();
        assert_eq!(err.field, field, "{text}: {err}");
    }
    for level in ["debug", "WARN", "mrtr_gateway=debug,warn", "off"] {
        let c = Config::parse(&format!("[log]\nlevel = \"{level}\"\n{MINIMAL}"), None);
        assert_eq!(c.expect(level).log.level, level);
    }
    let err = Config::parse("", None).unwrap_err();
    assert_eq!(err.field, "backend");
    let err = Config::parse("[server]\nlisten2 = 1\n", None).unwrap_err();
    assert!(err.reason.contains("listen2"), "{err}");
    let err = Config::parse(&format!("[admin]\nport = 1\n{MINIMAL}"), None).unwrap_err();
    assert!(err.reason.contains("port"), "{err}");
}

#[test]
fn fleet_settings_are_checked_and_state_owner_still_names_the_replica() {
    let c = Config::parse(&format!("[state]\nowner = \"a\"\n{MINIMAL}"), None).unwrap();
    assert_eq!(c.fleet.replica_id, "a");
    assert_eq!(c.state.owner, "a");
    assert!(c.fleet.internal_listen.is_none());
    assert_eq!(c.backends[0].replay.default, Policy::Hold);
    let c = Config::parse(
        "[fleet]\nreplica_id = \"pod-1\"\ninternal_listen = \"0.0.0.0:8081\"\nadvertise = \"10.0.0.7:8081\"\n[[backend]]\nname = \"b\"\ncommand = \"s\"\nreplay = \"auto\"\nreplay_tools = { pay = \"hold\", get = \"replay\" }\n",
        None,
    )
    .unwrap();
    assert_eq!(c.state.owner, "pod-1");
    assert_eq!(c.fleet.advertise.as_deref(), Some("10.0.0.7:8081"));
    assert!(c.describe().contains("forward timeout   70s\n"));
    let short = Config::parse(
        "[fleet]\ninternal_listen = \"127.0.0.1:8081\"\nforward_timeout = \"30s\"\n[[backend]]\nname = \"b\"\ncommand = \"s\"\n",
        None,
    )
    .unwrap();
    assert!(
        short
            .describe()
            .contains("forward timeout   30s (not above limits.request_timeout")
    );
    let r = &c.backends[0].replay;
    assert_eq!(r.for_request("tools/call", Some("pay")), Policy::Hold);
    assert_eq!(r.for_request("tools/call", Some("get")), Policy::Replay);
    assert_eq!(r.for_request("tools/call", Some("other")), Policy::Auto);
    assert_eq!(r.for_request("prompts/get", Some("greet")), Policy::Hold);
    let cases = [
        ("[fleet]\nreplica_id = \"a b\"\n", "fleet.replica_id"),
        (
            "[state]\nowner = \"a\"\n[fleet]\nreplica_id = \"b\"\n",
            "fleet.replica_id",
        ),
        (
            "[fleet]\ninternal_listen = \"x\"\n",
            "fleet.internal_listen",
        ),
        (
            "[fleet]\ninternal_listen = \"0.0.0.0:1\"\n",
            "fleet.advertise",
        ),
        ("[fleet]\nadvertise = \"h:1\"\n", "fleet.advertise"),
        (
            "[fleet]\ninternal_listen = \"127.0.0.1:1\"\nadvertise = \"h:99999\"\n",
            "fleet.advertise",
        ),
        (
            "[fleet]\nforward_timeout = \"1ms\"\n",
            "fleet.forward_timeout",
        ),
        (
            "[fleet]\nmax_transcript_bytes = 0\n",
            "fleet.max_transcript_bytes",
        ),
        ("[fleet]\ndrain = \"1s\"\n", "config, line 2"),
    ];
    for (text, field) in cases {
        let err = Config::parse(&format!("{text}{MINIMAL}"), None).unwrap_err();
        assert_eq!(err.field, field, "{text}: {err}");
    }
    let err = Config::parse(&format!("{MINIMAL}replay = \"sometimes\"\n"), None).unwrap_err();
    assert_eq!(err.field, "backend[0].replay");
    let err =
        Config::parse(&format!("{MINIMAL}replay_tools = {{ t = \"x\" }}\n"), None).unwrap_err();
    assert_eq!(err.field, "backend[0].replay_tools.t");
}

#[test]
fn environment_keys_override_the_file() {
    let (_, secret) = Key::generate("envk").unwrap();
    let c = Config::parse(MINIMAL, Some(&format!("envk:{secret}"))).unwrap();
    assert!(!c.state.ephemeral);
    assert_eq!(c.state.keys.sealing_key_id(), "envk");
}

#[test]
fn each_listener_needs_an_address_of_its_own() {
    let listeners = |server: &str, admin: &str, internal: &str| {
        Config::parse(
            &format!(
                "[server]\nlisten = \"{server}\"\n[admin]\nlisten = \"{admin}\"\n\
                 [fleet]\ninternal_listen = \"{internal}\"\nadvertise = \"10.0.0.7:8081\"\n{MINIMAL}"
            ),
            None,
        )
    };
    let refused = [
        (
            "127.0.0.1:8080",
            "127.0.0.1:8080",
            "127.0.0.1:8081",
            "admin.listen",
        ),
        (
            "0.0.0.0:8080",
            "127.0.0.1:8080",
            "127.0.0.1:8081",
            "admin.listen",
        ),
        (
            "127.0.0.1:8080",
            "[::]:8080",
            "127.0.0.1:8081",
            "admin.listen",
        ),
        (
            "127.0.0.1:8080",
            "127.0.0.1:9090",
            "127.0.0.1:8080",
            "fleet.internal_listen",
        ),
        (
            "127.0.0.1:8080",
            "10.0.0.7:9090",
            "0.0.0.0:9090",
            "fleet.internal_listen",
        ),
    ];
    for (server, admin, internal, field) in refused {
        let err = listeners(server, admin, internal).unwrap_err();
        assert_eq!(err.field, field, "{server} {admin} {internal}: {err}");
        assert!(err.reason.contains("clashes with"), "{err}");
    }
    let taken = [
        // Port 0: each listener gets a free port of its own.
        ("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"),
        ("0.0.0.0:8080", "0.0.0.0:9090", "0.0.0.0:8081"),
        ("127.0.0.1:8080", "10.0.0.7:8080", "[::1]:8080"),
    ];
    for (server, admin, internal) in taken {
        let c = listeners(server, admin, internal);
        assert!(c.is_ok(), "{server} {admin} {internal}: {:?}", c.err());
    }
}

#[test]
fn one_address_gets_a_sixteenth_of_the_connections_unless_configured() {
    let c = Config::parse(MINIMAL, None).unwrap();
    assert_eq!(c.server.max_connections_per_address, 64, "1024 / 16");
    assert!(
        c.describe()
            .contains("connections       1024 at most, 64 per address, shutdown grace")
    );
    let per_address = |server: &str| {
        Config::parse(&format!("[server]\n{server}\n{MINIMAL}"), None)
            .map(|c| c.server.max_connections_per_address)
    };
    assert_eq!(per_address("max_connections = 20000").unwrap(), 1250);
    assert_eq!(
        per_address("max_connections = 32").unwrap(),
        4,
        "at least 4"
    );
    assert_eq!(
        per_address("max_connections = 2").unwrap(),
        2,
        "no more than all"
    );
    let lifted = "max_connections = 100\nmax_connections_per_address = 100";
    assert_eq!(per_address(lifted).unwrap(), 100);
    for refused in [
        "max_connections_per_address = 0",
        "max_connections = 100\nmax_connections_per_address = 101",
    ] {
        let err = per_address(refused).unwrap_err();
        assert_eq!(err.field, "server.max_connections_per_address", "{err}");
    }
}

#[test]
fn check_prints_durations_sizes_and_lists_as_plain_text() {
    assert_eq!(duration(Duration::ZERO), "0s");
    assert_eq!(duration(Duration::from_secs(120)), "120s");
    assert_eq!(duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(duration(Duration::from_micros(250)), "250us");
    assert_eq!(duration(Duration::from_nanos(7)), "7ns");
    assert_eq!(bytes(0), "0 bytes");
    assert_eq!(bytes(1536), "1536 bytes");
    assert_eq!(bytes(16 * 1024), "16 KiB");
    assert_eq!(bytes(4 << 20), "4 MiB");
    assert_eq!(bytes(2 << 30), "2 GiB");
    let c = Config::parse(
        "[server]\nallowed_origins = [\"https://a.example\", \"https://b.example\"]\n\
         [principal]\nsource = \"header\"\nheader = \"X-User\"\n\
         [state]\npark_ttl = \"1500ms\"\ncoalesce_window = \"0s\"\n\
         [limits]\nmax_body_bytes = 2097152\nmax_json_depth = 32\nmax_line_bytes = 1536\n\
         max_parked_per_principal = 8\nmax_parked_total = 100\nqueue_wait = \"2s\"\n\
         request_timeout = \"90s\"\nheld_roots_wait = \"250ms\"\n\
         [[backend]]\nname = \"b\"\ncommand = \"server\"\nargs = [\"--stdio\", \"-v\"]\n\
         env = { TOKEN = \"s3cret\" }\nreplay_tools = { pay = \"replay\" }\n",
        None,
    )
    .unwrap();
    let text = c.describe();
    for line in [
        "allowed origins   https://a.example, https://b.example\n",
        "principal         a digest of the x-user header\n",
        "park ttl          1500ms\n",
        "coalesce window   0s\n",
        "request bodies    2 MiB at most, JSON depth 32\n",
        "backend messages  1536 bytes at most\n",
        "parked calls      8 per principal, 100 in all\n",
        "input requests    32 per call\n",
        "waits             queue 2s, backend round 90s, held roots 250ms\n",
        "-> stdio server (args --stdio, -v; env TOKEN set) (pool 16: 4 per principal for calls that may ask for input, 2 kept for calls that need none; idle 300s, probes server/discover (waits 10s), else asks 2025-11-25, policy hold (pay: replay))\n",
    ] {
        assert!(text.contains(line), "no `{}` in:\n{text}", line.trim_end());
    }
    // Debug output would show braces, `Some(..)`, type names; the value of `env` is never shown.
    for debug in ["{", "}", "Some(", "Header(", "Limits", "s3cret"] {
        assert!(!text.contains(debug), "`{debug}` in:\n{text}");
    }
}

#[test]
fn an_idle_admin_connection_gets_a_short_head_timeout() {
    let c = Config::parse(MINIMAL, None).unwrap();
    assert_eq!(c.admin.header_timeout, Duration::from_secs(5));
    let c = Config::parse(
        &format!("[admin]\nheader_timeout = \"2s\"\n{MINIMAL}"),
        None,
    );
    assert_eq!(c.unwrap().admin.header_timeout, Duration::from_secs(2));
    for refused in ["\"0s\"", "\"2m\""] {
        let text = format!("[admin]\nheader_timeout = {refused}\n{MINIMAL}");
        let err = Config::parse(&text, None).unwrap_err();
        assert_eq!(err.field, "admin.header_timeout", "{err}");
    }
}

#[test]
fn a_reply_may_be_the_largest_result_unless_configured_from_64_kib_to_1_gib() {
    let limits = |text: &str| Config::parse(&format!("[limits]\n{text}\n{MINIMAL}"), None);
    assert_eq!(
        limits("").unwrap().limits.max_reply_bytes,
        (4 << 20) + (64 << 10)
    );
    let c = limits("max_line_bytes = 1536").unwrap();
    assert_eq!(c.limits.max_reply_bytes, 1536 + (64 << 10));
    let c = limits("max_reply_bytes = 65536").unwrap();
    assert_eq!(c.limits.max_reply_bytes, 65536);
    assert!(c.describe().contains("replies           64 KiB at most\n"));
    for refused in ["65535", "1073741825"] {
        let err = limits(&format!("max_reply_bytes = {refused}")).unwrap_err();
        assert_eq!(err.field, "limits.max_reply_bytes", "{err}");
    }
}

#[test]
fn tool_lists_kept_are_bounded_and_the_bounds_checked() {
    let c = Config::parse(MINIMAL, None).unwrap();
    assert_eq!(c.limits.max_tool_catalogs, 4096);
    assert_eq!(c.limits.max_tools_per_catalog, 1024);
    for (key, value) in [
        ("max_tool_catalogs", "0"),
        ("max_tool_catalogs", "2000000"),
        ("max_tools_per_catalog", "0"),
        ("max_tools_per_catalog", "100000"),
    ] {
        let text = format!("[limits]\n{key} = {value}\n{MINIMAL}");
        let err = Config::parse(&text, None).unwrap_err().to_string();
        assert!(err.contains(&format!("limits.{key}")), "{err}");
        assert!(err.contains("must be between"), "{err}");
    }
}
