//! Every response the listeners send is built here: a JSON-RPC outcome or refusal with its HTTP
//! status, an event stream, plain text, an empty body. [`Refusal`] is the one way a face turns a
//! request it will not serve into a reply, and [`status_of`] the one rule for the status of an
//! engine's outcome.

use super::Body;
use crate::jsonrpc::{self, ErrorObject, Id, Payload};
use crate::metrics;
use bytes::Bytes;
use futures_util::Stream;
use http::{StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use std::convert::Infallible;

/// A request refused before the engine saw it: the HTTP status and the JSON-RPC error that
/// explains it.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub id: Option<Id>,
    pub error: ErrorObject,
    /// For the request counter; `other` until the body's method is known.
    pub method: metrics::Method,
}

impl Refusal {
    pub fn new(
        status: StatusCode,
        id: Option<&Id>,
        code: i64,
        message: impl Into<String>,
    ) -> Refusal {
        Refusal {
            status,
            id: id.cloned(),
            error: ErrorObject::new(code, message),
            method: metrics::Method::Other,
        }
    }

    pub fn with_data(mut self, data: Value) -> Refusal {
        self.error = self.error.with_data(data);
        self
    }

    pub fn of(mut self, method: metrics::Method) -> Refusal {
        self.method = method;
        self
    }

    /// The response: the error as a JSON-RPC reply, under the refusal's status.
    pub fn into_response(self) -> hyper::Response<Body> {
        json(
            self.status,
            &jsonrpc::response(self.id.as_ref(), Err(self.error)),
        )
    }
}

/// The HTTP status of an outcome sent as JSON. 2026-07-28 gives four errors a status of their
/// own, whoever raised them (the gateway or the backend): a missing client capability (-32021)
/// is 400, a method not implemented (-32601) is 404, headers that do not match the body
/// (-32020: the engine's check of `Mcp-Param-*`, or a relayed backend's own) are 400, and an
/// unsupported version (-32022, a relayed backend's) is 400. Anything else is 200. An outcome after notifications goes at the end of an event
/// stream whose status was sent with its first event.
pub fn status_of(outcome: &Result<Payload, ErrorObject>) -> StatusCode {
    match outcome {
        Err(e) if e.code == jsonrpc::MISSING_CLIENT_CAPABILITY => StatusCode::BAD_REQUEST,
        Err(e) if e.code == jsonrpc::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        Err(e) if e.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        Err(e) if e.code == jsonrpc::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The engine's outcome for request `id`, as JSON under its status. The outcome is dropped
/// once written: the response's text is then the one copy of the reply its connection holds,
/// for as long as a client that stopped reading leaves it unwritten.
pub fn outcome(id: &Id, outcome: Result<Payload, ErrorObject>) -> hyper::Response<Body> {
    let status = status_of(&outcome);
    bytes(status, jsonrpc::response_text(Some(id), &outcome))
}

pub fn json(status: StatusCode, body: &Value) -> hyper::Response<Body> {
    bytes(
        status,
        serde_json::to_vec(body).expect("JSON values serialize"),
    )
}

/// A JSON body already written.
pub fn bytes(status: StatusCode, bytes: Vec<u8>) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(BodyExt::boxed_unsync(Full::new(Bytes::from(bytes))))
        .expect("valid response")
}

pub fn text(status: StatusCode, body: impl Into<Bytes>) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(BodyExt::boxed_unsync(Full::new(body.into())))
        .expect("valid response")
}

pub fn empty(status: StatusCode) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(status)
        .body(BodyExt::boxed_unsync(Full::new(Bytes::new())))
        .expect("valid response")
}

/// A 200 event stream of `events`, each already framed.
pub fn event_stream<S>(events: S) -> hyper::Response<Body>
where
    S: Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static,
{
    hyper::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(BodyExt::boxed_unsync(StreamBody::new(events)))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_to_a_text_result_is_one_copy_of_its_exact_size() {
        let id = Id::String("a-long-request-id-".repeat(20));
        let result = Payload::Text(format!("{{\"text\":\"{}\"}}", "x".repeat(100_000)));
        let text = jsonrpc::response_text(Some(&id), &Ok(result));
        assert_eq!(text.capacity(), text.len(), "no room left over to hold");
        let value: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            value["result"]["text"].as_str().map(str::len),
            Some(100_000)
        );
    }
}
