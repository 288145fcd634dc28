//! Where a Streamable HTTP session's requests go ([`Endpoint`]) and the headers each of them
//! carries: the session id the backend gave and the negotiated version, read by the session's
//! transport and by every request task.

use super::link::{ACCEPT_ANSWER, ACCEPT_STREAM, Link};
use crate::protocol::header::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use http::{HeaderName, HeaderValue, Uri, header};
use std::sync::{Arc, Mutex};

/// Made once, as the MCP header names are ([`crate::protocol::header`]).
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Session facts the request tasks read: the id the backend gave, the negotiated version.
#[derive(Debug, Default)]
pub(super) struct Ids {
    pub(super) session: Option<HeaderValue>,
    pub(super) version: Option<HeaderValue>,
}

/// Where a session's requests go.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    pub(super) link: Arc<Link>,
    pub(super) ids: Arc<Mutex<Ids>>,
    pub(super) url: Uri,
}

/// A request's own headers (the configured ones aside): a few, each named once, written in
/// order.
type Headers = Vec<(HeaderName, HeaderValue)>;

/// Headers every request of the session carries, and room for two more.
pub(super) fn session_headers(ids: &Mutex<Ids>) -> Headers {
    let ids = ids.lock().expect("ids lock");
    let mut h = Vec::with_capacity(4);
    if let Some(s) = &ids.session {
        h.push((MCP_SESSION_ID, s.clone()));
    }
    if let Some(v) = &ids.version {
        h.push((MCP_PROTOCOL_VERSION, v.clone()));
    }
    h
}

pub(super) fn post_headers(ids: &Mutex<Ids>) -> Headers {
    let mut h = session_headers(ids);
    h.push((header::ACCEPT, ACCEPT_ANSWER));
    h
}

/// The headers of a GET for an event stream, resumed after `last` if given.
pub(super) fn stream_headers(ids: &Mutex<Ids>, last: Option<&str>) -> Headers {
    let mut h = session_headers(ids);
    h.push((header::ACCEPT, ACCEPT_STREAM));
    if let Some(v) = last.and_then(|l| HeaderValue::from_str(l).ok()) {
        h.push((LAST_EVENT_ID, v));
    }
    h
}

pub(super) fn has_session(ids: &Mutex<Ids>) -> bool {
    ids.lock().expect("ids lock").session.is_some()
}
