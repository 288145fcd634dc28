//! Server-Sent Events encoding for response streams. Events carry one JSON message each; the
//! data never contains a newline because serde_json escapes them.

use serde_json::Value;

/// One SSE event: `event: NAME`, one `data:` line, blank line.
pub fn encode(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_in_data_stay_escaped() {
        let ev = encode("message", &serde_json::json!({"t": "a\nb"}));
        assert_eq!(ev, "event: message\ndata: {\"t\":\"a\\nb\"}\n\n");
    }
}
