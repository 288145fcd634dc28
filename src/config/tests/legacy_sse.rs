//! A backend's HTTP+SSE face (`sse_path`, `messages_path`): off unless set, both or neither,
//! each path its own, and shown by `check`.

use crate::config::{Config, LegacySse};

const TWO: &str = "[[backend]]\nname = \"a\"\ncommand = \"srv\"\npath = \"/a\"\n";

fn with(first: &str, second: &str) -> Result<Config, crate::config::ConfigError> {
    Config::parse(
        &format!("{TWO}{first}\n[[backend]]\nname = \"b\"\ncommand = \"srv\"\n{second}"),
        None,
    )
}

#[test]
fn the_http_sse_face_is_off_unless_both_paths_are_set() {
    let c = with("", "path = \"/b\"\n").unwrap();
    assert!(c.backends.iter().all(|b| b.legacy_sse.is_none()));
    let c = with(
        "sse_path = \"/a/sse\"\nmessages_path = \"/a/messages\"\n",
        "path = \"/b\"\n",
    )
    .unwrap();
    assert_eq!(
        c.backends[0].legacy_sse,
        Some(LegacySse {
            sse_path: "/a/sse".into(),
            messages_path: "/a/messages".into(),
        })
    );
    let text = c.describe();
    assert!(
        text.contains("/a (HTTP+SSE: GET /a/sse, POST /a/messages) -> stdio srv"),
        "{text}"
    );
    assert!(text.contains("b         /b -> stdio srv"), "{text}");
}

#[test]
fn each_path_of_the_http_sse_face_is_checked_and_its_own() {
    let cases = [
        (
            "sse_path = \"/s\"\n",
            "path = \"/b\"\n",
            "backend[0].messages_path",
        ),
        (
            "messages_path = \"/m\"\n",
            "path = \"/b\"\n",
            "backend[0].sse_path",
        ),
        (
            "sse_path = \"s\"\nmessages_path = \"/m\"\n",
            "path = \"/b\"\n",
            "backend[0].sse_path",
        ),
        (
            "sse_path = \"/s\"\nmessages_path = \"/m?x=1\"\n",
            "path = \"/b\"\n",
            "backend[0].messages_path",
        ),
        (
            "sse_path = \"/s\"\nmessages_path = \"/s\"\n",
            "path = \"/b\"\n",
            "backend[0].messages_path",
        ),
        (
            "sse_path = \"/a\"\nmessages_path = \"/m\"\n",
            "path = \"/b\"\n",
            "backend[0].sse_path",
        ),
        // A later backend may not take an earlier one's paths, on any face.
        (
            "sse_path = \"/s\"\nmessages_path = \"/m\"\n",
            "path = \"/s\"\n",
            "backend[1].path",
        ),
        (
            "sse_path = \"/s\"\nmessages_path = \"/m\"\n",
            "path = \"/b\"\nsse_path = \"/bs\"\nmessages_path = \"/m\"\n",
            "backend[1].messages_path",
        ),
        (
            "",
            "path = \"/b\"\nsse_path = \"/a\"\nmessages_path = \"/bm\"\n",
            "backend[1].sse_path",
        ),
    ];
    for (first, second, field) in cases {
        let err = with(first, second).expect_err(field).to_string();
        assert!(err.contains(field), "{first}{second}: {err}");
    }
}
