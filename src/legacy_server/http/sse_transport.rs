//! The 2024-11-05 HTTP+SSE transport: `GET /sse` opens a session whose single event stream
//! carries everything the server sends (after an `endpoint` event naming the POST URL), and
//! `POST /messages?session_id=..` takes the client's messages. Closing the stream ends the
//! session.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use hyper::body::Incoming;

use super::{Handled, HttpError, Server, read_posted, sse_response, status_only};

pub(super) fn open(server: &Arc<Server>) -> Handled {
    let session = server.create_session()?;
    let endpoint = (!server.opts.http.no_endpoint).then(|| {
        Bytes::from(format!(
            "event: endpoint\ndata: /messages?session_id={}\n\n",
            session.id
        ))
    });
    let opened = session.streams().open_standalone(endpoint);
    match opened {
        // The session lives as long as its stream: dropping the body ends it.
        Ok(rx) => Ok(sse_response(rx, Some(session.ended.clone().drop_guard()))),
        Err(err) => {
            server.end_session(&session);
            Err(err.into())
        }
    }
}

pub(super) async fn post(server: &Arc<Server>, req: Request<Incoming>) -> Handled {
    let id =
        session_param(req.uri().query().unwrap_or("")).ok_or(HttpError::MissingSessionParam)?;
    let session = server.session(&id)?;
    let posted = read_posted(req, server.opts.http.max_body_bytes).await?;
    session.deliver(posted.msgs).await?;
    Ok(status_only(StatusCode::ACCEPTED))
}

fn session_param(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("session_id="))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}
