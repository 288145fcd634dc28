//! The headers of MCP's Streamable HTTP: their names, made once (a name given as text is
//! parsed, and one that is not a standard HTTP header allocated, at each use), and the
//! `=?base64?...?=` form of the values that mirror the body (`Mcp-Name`, `Mcp-Param-{Name}`).

use base64::Engine;
use http::HeaderName;

pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Decodes a mirrored value: the `=?base64?...?=` form a client uses for text that is not
/// plain ASCII (2026-07-28 Streamable HTTP, "Value Encoding"), or the text as it is. `None`
/// when the form is malformed: not canonical base64 (padding included), or not UTF-8 inside.
pub fn decode_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_owned()),
    }
}

/// Encodes a value to mirror in a header: as it is when it is printable ASCII without
/// surrounding spaces, else in the `=?base64?...?=` form [`decode_value`] reads.
pub fn encode_value(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.trim() == text
        && !text.starts_with("=?base64?");
    if plain {
        text.to_owned()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        format!("=?base64?{encoded}?=")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_decode_the_base64_form() {
        assert_eq!(decode_value("plain").as_deref(), Some("plain"));
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_value("=?base64?!!?="), None);
        for text in ["plain", "Hello, 世界", " padded ", "=?base64?x?="] {
            assert_eq!(decode_value(&encode_value(text)).as_deref(), Some(text));
        }
    }

    #[test]
    fn the_base64_form_needs_its_padding_its_alphabet_and_utf8() {
        assert_eq!(
            decode_value("=?base64?SGVsbG8=?=").as_deref(),
            Some("Hello")
        );
        assert_eq!(decode_value("=?base64?SGVsbG8?="), None);
        assert_eq!(decode_value("=?base64?SGV$bG8=?="), None);
        assert_eq!(decode_value("=?base64?SGVsbG8==?="), None);
        assert_eq!(decode_value("=?base64?/w==?="), None);
        // The markers are case-sensitive: anything else is plain text.
        assert_eq!(
            decode_value("=?BASE64?SGVsbG8=?=").as_deref(),
            Some("=?BASE64?SGVsbG8=?=")
        );
    }

    proptest::proptest! {
        #[test]
        fn any_header_value_decodes_or_is_refused_and_the_base64_form_round_trips(
            raw in proptest::prelude::any::<String>(),
            text in proptest::prelude::any::<String>(),
        ) {
            let _ = decode_value(&raw);
            let encoded = base64::engine::general_purpose::STANDARD.encode(&text);
            let wrapped = format!("=?base64?{encoded}?=");
            proptest::prop_assert_eq!(decode_value(&wrapped), Some(text));
        }
    }
}
