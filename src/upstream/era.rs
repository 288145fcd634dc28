//! Which era a backend speaks, found out once and kept. A backend set to `auto` on Streamable
//! HTTP or stdio is probed as a dual-era client would (2026-07-28 "Backward compatibility"): a
//! `server/discover` with the 2026 headers and `_meta` (on stdio, the first line of a new
//! child). A `DiscoverResult` naming 2026-07-28, or a -32022 whose `data.supported` names it,
//! means modern; anything else (an HTTP error, a legacy error whatever its code, a body that is
//! not JSON-RPC, a child that exits, no answer within `probe_timeout`) means legacy. Concurrent
//! first callers share one probe; a verdict that stops holding is forgotten ([`Cache::forget`])
//! and the next caller probes again.

use super::modern::{Answer, Outgoing, Upstream};
use crate::config::{Backend, Protocol, Transport};
use crate::jsonrpc::{Id, Message, UNSUPPORTED_PROTOCOL_VERSION};
use crate::metrics::{self, Metrics};
use crate::protocol::{MODERN, header, meta};
use http::HeaderValue;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// The era a backend is driven in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize`, sessions, the bridge.
    Legacy,
    /// 2026-07-28: requests relayed as the client sent them.
    Modern,
}

/// What a probe concluded, and why (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub era: Era,
    pub why: String,
    /// Kept for later callers; an unreachable backend's verdict is not (its era is unknown).
    pub lasting: bool,
}

/// One backend's era: fixed by its config, or probed and kept.
#[derive(Debug)]
pub struct Cache {
    backend: String,
    fixed: Option<Era>,
    /// The probed era ([`UNKNOWN`] until a probe settles it): read without a lock, since every
    /// request to the backend asks for it.
    known: AtomicU8,
    /// Held across a probe, so concurrent first callers wait for the one probe.
    probing: tokio::sync::Mutex<()>,
    /// Probes finished, and the era the last one found: a caller that waited for a probe
    /// takes its verdict even when it was not kept, rather than probing again after it (each
    /// caller in the queue would otherwise wait one more probe).
    probes: AtomicU64,
    last: AtomicU8,
}

/// No probe has settled the era, or it was forgotten.
const UNKNOWN: u8 = 0;

fn encode(era: Era) -> u8 {
    match era {
        Era::Legacy => 1,
        Era::Modern => 2,
    }
}

fn decode(known: u8) -> Option<Era> {
    match known {
        1 => Some(Era::Legacy),
        2 => Some(Era::Modern),
        _ => None,
    }
}

impl Cache {
    pub fn new(backend: &Backend) -> Cache {
        let fixed = match (&backend.transport, backend.protocol) {
            (Transport::Http(_) | Transport::Stdio(_), Protocol::Auto) => None,
            (Transport::Http(_) | Transport::Stdio(_), Protocol::Modern) => Some(Era::Modern),
            // HTTP+SSE is a legacy transport, and the built-in server a legacy server.
            _ => Some(Era::Legacy),
        };
        Cache {
            backend: backend.name.clone(),
            fixed,
            known: AtomicU8::new(UNKNOWN),
            probing: tokio::sync::Mutex::new(()),
            probes: AtomicU64::new(0),
            last: AtomicU8::new(UNKNOWN),
        }
    }

    /// The backend's era, probing it over `upstream` first if nobody has. The probe goes with
    /// the `Authorization` the backend's policy gives the request that needs it (the client's
    /// own for `pass`), as that request would: a backend behind authentication answers it.
    pub(crate) async fn era(
        &self,
        upstream: Option<&Upstream>,
        authorization: Option<&HeaderValue>,
        metrics: &Metrics,
    ) -> Era {
        if let Some(era) = self
            .fixed
            .or_else(|| decode(self.known.load(Ordering::Acquire)))
        {
            return era;
        }
        let Some(upstream) = upstream else {
            return Era::Legacy;
        };
        let seen = self.probes.load(Ordering::Acquire);
        let _probing = self.probing.lock().await;
        // Settled by the probe this caller waited for, or told by it.
        if let Some(era) = decode(self.known.load(Ordering::Acquire)) {
            return era;
        }
        if self.probes.load(Ordering::Acquire) != seen {
            return decode(self.last.load(Ordering::Acquire)).unwrap_or(Era::Legacy);
        }
        // Boxed: every request's future holds this one's, and a probe runs once.
        let verdict = Box::pin(probe(upstream, authorization)).await;
        if verdict.era == Era::Legacy {
            upstream.found_legacy().await;
        }
        let backend = &self.backend;
        tracing::info!(%backend, era = ?verdict.era, why = %verdict.why, "backend era probed");
        metrics.era_probe(backend, label(verdict.era));
        if verdict.lasting {
            self.known.store(encode(verdict.era), Ordering::Release);
        }
        self.last.store(encode(verdict.era), Ordering::Release);
        self.probes.fetch_add(1, Ordering::AcqRel);
        verdict.era
    }

    /// Forgets a probed era that stopped holding (`was`): the next caller probes again. A fixed
    /// era is never forgotten; nor is one a probe is settling now (it is not known yet), nor
    /// one that another caller forgot or a probe changed since.
    pub fn forget(&self, was: Era, why: &str, metrics: &Metrics) {
        if self.fixed.is_some() {
            return;
        }
        let forgotten =
            self.known
                .compare_exchange(encode(was), UNKNOWN, Ordering::AcqRel, Ordering::Acquire);
        if forgotten.is_ok() {
            let backend = &self.backend;
            tracing::warn!(%backend, era = ?was, %why, "the backend's era no longer holds; probing it again");
            metrics.era_reprobe(backend);
        }
    }
}

fn label(era: Era) -> metrics::Era {
    match era {
        Era::Legacy => metrics::Era::Legacy,
        Era::Modern => metrics::Era::Modern,
    }
}

/// The probe's id: the only request on its exchange.
const PROBE_ID: &str = "era-probe";

/// Sends `server/discover` as a 2026-07-28 client does, and classifies what comes back.
async fn probe(upstream: &Upstream, authorization: Option<&HeaderValue>) -> Verdict {
    let mut params = Map::new();
    params.insert(
        "_meta".into(),
        json!({
            meta::PROTOCOL_VERSION: MODERN,
            meta::CLIENT_CAPABILITIES: {},
            meta::CLIENT_INFO: {"name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION")},
        }),
    );
    let id = Id::String(PROBE_ID.into());
    let out = Outgoing {
        id: &id,
        method: "server/discover",
        params: &params,
        headers: vec![
            (
                header::MCP_PROTOCOL_VERSION,
                HeaderValue::from_static(MODERN),
            ),
            (
                header::MCP_METHOD,
                HeaderValue::from_static("server/discover"),
            ),
        ],
        authorization,
        child: None,
        principal: None,
    };
    let answer = tokio::time::timeout(upstream.probe_timeout(), async {
        match upstream.probe(out).await {
            Ok(Answer::Json(msgs)) => Ok(msgs.into_iter().find(is_response)),
            Ok(Answer::Stream(mut stream)) => loop {
                match stream.next().await {
                    Some(Ok(msg)) if is_response(&msg) => break Ok(Some(msg)),
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break Ok(None),
                }
            },
            Err(f) => Err(f),
        }
    })
    .await;
    match answer {
        Err(_) => legacy("no answer in time"),
        Ok(Err(super::http::Failure::Connect(e))) => Verdict {
            lasting: false,
            ..legacy(&format!(
                "not reachable ({e}); probed again at the next call"
            ))
        },
        Ok(Err(super::http::Failure::Denied(e))) => Verdict {
            lasting: false,
            ..legacy(&format!(
                "refused the credential the probe carried ({e}); probed again at the next call"
            ))
        },
        Ok(Err(f)) => legacy(&f.describe()),
        Ok(Ok(response)) => classify(response.as_ref()),
    }
}

fn is_response(msg: &Message) -> bool {
    matches!(msg, Message::Response { .. })
}

fn legacy(why: &str) -> Verdict {
    Verdict {
        era: Era::Legacy,
        why: why.to_owned(),
        lasting: true,
    }
}

/// The era a probe's response shows: only positive evidence of 2026-07-28 is modern, so the
/// fallback is never keyed to one error code.
pub fn classify(response: Option<&Message>) -> Verdict {
    let modern = |why: &str| Verdict {
        era: Era::Modern,
        why: why.to_owned(),
        lasting: true,
    };
    match response {
        None => legacy("no JSON-RPC response to server/discover"),
        Some(Message::Response {
            outcome: Ok(raw), ..
        }) => {
            let result = raw.to_value().unwrap_or(Value::Null);
            if names_modern(result.get("supportedVersions")) {
                modern("server/discover answered with a DiscoverResult")
            } else {
                legacy("server/discover answered with a result that names no 2026-07-28 version")
            }
        }
        Some(Message::Response {
            outcome: Err(e), ..
        }) => {
            let supported = e.data.as_ref().and_then(|d| d.get("supported"));
            if e.code == UNSUPPORTED_PROTOCOL_VERSION && names_modern(supported) {
                modern("server/discover refused with -32022 naming 2026-07-28")
            } else {
                legacy(&format!("server/discover refused with {}", e.code))
            }
        }
        Some(_) => legacy("server/discover answered with something that is not a response"),
    }
}

fn names_modern(versions: Option<&Value>) -> bool {
    versions
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(MODERN)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc;

    fn parsed(text: &str) -> Message {
        jsonrpc::parse(text.as_bytes(), 64).expect("a message")
    }

    fn era_of(text: &str) -> Era {
        classify(Some(&parsed(text))).era
    }

    #[test]
    fn a_discover_result_naming_2026_is_modern() {
        let r = r#"{"jsonrpc":"2.0","id":"era-probe","result":{"resultType":"complete",
            "supportedVersions":["2025-11-25","2026-07-28"],"capabilities":{}}}"#;
        assert_eq!(era_of(r), Era::Modern);
        let old =
            r#"{"jsonrpc":"2.0","id":"era-probe","result":{"supportedVersions":["2025-11-25"]}}"#;
        assert_eq!(
            era_of(old),
            Era::Legacy,
            "a discover naming only legacy versions"
        );
        assert_eq!(
            era_of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Era::Legacy
        );
    }

    #[test]
    fn unsupported_version_naming_2026_is_modern_and_nothing_else_is() {
        let e = r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32022,"message":"no",
            "data":{"supported":["2026-07-28"],"requested":"2026-07-28"}}}"#;
        assert_eq!(era_of(e), Era::Modern);
        for legacy in [
            // -32022 without the data that makes it a 2026 error, or naming only legacy ones.
            r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32022,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32022,"message":"no","data":{"supported":["2025-06-18"]}}}"#,
            // Legacy servers' answers: method not found, invalid params, missing session.
            r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32601,"message":"Method not found"}}"#,
            r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32602,"message":"Invalid request parameters"}}"#,
            r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}"#,
            r#"{"jsonrpc":"2.0","id":"era-probe","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#,
        ] {
            assert_eq!(era_of(legacy), Era::Legacy, "{legacy}");
        }
    }

    #[test]
    fn no_response_is_legacy() {
        assert_eq!(classify(None).era, Era::Legacy);
        let note = parsed(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
        assert_eq!(classify(Some(&note)).era, Era::Legacy);
    }
}
