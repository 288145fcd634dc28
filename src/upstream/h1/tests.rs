//! The client against backends on real sockets (plain and TLS) that answer in pieces of any size.

use super::body::chunk_size;
use super::head::{Chunk, Framing, parse_head};
use super::*;
use http::{StatusCode, header};
use http_body_util::BodyExt;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

fn client() -> Client {
    Client::new(
        connector(Duration::from_secs(5), None, None),
        4,
        1024,
        &crate::shard::Shards::none(),
    )
}

/// A backend that answers each connection's requests with `answers`, in order, written in
/// pieces of `piece` bytes; it reports each request it read.
async fn backend(
    answers: Vec<&'static [u8]>,
    piece: usize,
) -> (Uri, tokio::sync::mpsc::UnboundedReceiver<String>) {
    backend_on(answers, piece, None).await
}

/// [`backend`], over TLS with `tls` if given (its URL is then `https://localhost:PORT`).
async fn backend_on(
    answers: Vec<&'static [u8]>,
    piece: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (Uri, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let uri = match &tls {
        Some(_) => format!("https://localhost:{}/mcp?x=1", addr.port()),
        None => format!("http://{addr}/mcp?x=1"),
    };
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let answers = answers.clone();
            let tx = tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    // A handshake the client refuses ends the connection here.
                    Some(tls) => {
                        if let Ok(s) = tls.accept(s).await {
                            serve(s, answers, piece, tx).await
                        }
                    }
                    None => serve(s, answers, piece, tx).await,
                }
            });
        }
    });
    (uri.parse().unwrap(), rx)
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    answers: Vec<&'static [u8]>,
    piece: usize,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) {
    for answer in answers {
        let mut req = Vec::new();
        let mut byte = [0u8; 1];
        // Head, then the body its Content-Length announces.
        while !req.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            req.push(byte[0]);
        }
        let text = String::from_utf8(req).unwrap();
        let len = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.parse::<usize>().unwrap());
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        tx.send(text + std::str::from_utf8(&body).unwrap()).unwrap();
        for p in answer.chunks(piece) {
            s.write_all(p).await.unwrap();
            s.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A POST of a JSON `body` that accepts an event stream.
struct Post {
    uri: Uri,
    configured: HeaderMap,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: &'static str,
}

impl Post {
    fn req(&self) -> Request<'_> {
        Request {
            method: &Method::POST,
            uri: &self.uri,
            configured: &self.configured,
            headers: &self.headers,
            json: Some(self.body.as_bytes()),
        }
    }
}

fn post(uri: &Uri, body: &'static str) -> Post {
    Post {
        uri: uri.clone(),
        configured: HeaderMap::new(),
        headers: vec![(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        )],
        body,
    }
}

async fn text(resp: http::Response<Body>) -> Result<String, io::Error> {
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(bytes.to_vec()).unwrap())
}

proptest::proptest! {
    #[test]
    fn any_head_bytes_are_refused_or_read_never_a_panic(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)
    ) {
        let _ = parse_head(&bytes);
    }

    #[test]
    fn a_head_is_read_once_it_has_all_arrived(
        status in 200u16..600,
        length in 0u64..(1 << 40),
        session in "[!-~]{1,64}",
        padding in "[ -~]{0,200}",
        cut in proptest::prelude::any::<proptest::sample::Index>(),
    ) {
        let head = format!(
            "HTTP/1.1 {status} Whatever\r\nx-padding: {padding}\r\ncontent-length: {length}\r\nMcp-Session-Id: {session}\r\n\r\n"
        );
        let bytes = head.as_bytes();
        let partial = &bytes[..cut.index(bytes.len())];
        proptest::prop_assert!(matches!(parse_head(partial), Ok(None)));
        let read = parse_head(bytes).expect("a valid head").expect("complete");
        proptest::prop_assert_eq!(read.status.as_u16(), status);
        proptest::prop_assert_eq!(read.len, bytes.len());
        proptest::prop_assert_eq!(
            read.headers[crate::protocol::header::MCP_SESSION_ID].as_bytes(),
            session.as_bytes()
        );
    }
}

#[tokio::test]
async fn chunked_and_sized_bodies_arrive_whole_and_the_connection_is_kept() {
    let chunked: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: t\r\n\r\n";
    let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n{ }\n";
    for piece in [1, 7, 4096] {
        let (uri, mut seen) = backend(vec![chunked, sized], piece).await;
        let c = client();
        let resp = c.send(post(&uri, "{\"a\":1}").req()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(text(resp).await.unwrap(), "hello, world");
        let req = seen.recv().await.unwrap();
        assert!(
            req.starts_with("POST /mcp?x=1 HTTP/1.1\r\nhost: 127.0.0.1:"),
            "{req}"
        );
        assert!(req.contains("accept: text/event-stream\r\n"), "{req}");
        assert!(req.ends_with("content-length: 7\r\n\r\n{\"a\":1}"), "{req}");
        // The second exchange goes on the same connection: the backend serves both there.
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "{ }\n");
        assert!(seen.recv().await.is_some());
    }
}

/// A self-signed certificate for `localhost`: an acceptor that serves it, and a client that
/// trusts it as its private CA.
fn tls_pair() -> (tokio_rustls::TlsAcceptor, Client) {
    use tokio_rustls::rustls::pki_types::PrivateKeyDer;
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(signing_key.serialize_der().into()),
    )
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        Client::new(
            connector(Duration::from_secs(5), Some(&roots), None),
            4,
            1024,
            &crate::shard::Shards::none(),
        ),
    )
}

#[tokio::test]
async fn over_tls_bodies_arrive_whole_and_the_connection_is_kept() {
    let chunked: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
    let empty: &[u8] = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
    let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n{ }\n";
    for piece in [1, 4096] {
        let (acceptor, c) = tls_pair();
        let (uri, mut seen) = backend_on(vec![chunked, empty, sized], piece, Some(acceptor)).await;
        let resp = c.send(post(&uri, "{\"a\":1}").req()).await.unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(text(resp).await.unwrap(), "hello, world");
        let req = seen.recv().await.unwrap();
        assert!(
            req.starts_with("POST /mcp?x=1 HTTP/1.1\r\nhost: localhost:"),
            "{req}"
        );
        assert!(req.ends_with("content-length: 7\r\n\r\n{\"a\":1}"), "{req}");
        // An empty answer (as a backend gives the gateway's answers to its requests) gives
        // its connection back unread.
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        drop(resp);
        // All three exchanges go on one connection: only the first serves `sized` third.
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "{ }\n");
        assert_eq!(seen.recv().await.map(|_| ()), Some(()));
        assert_eq!(idle(&c), 1, "piece {piece}");
    }
}

#[tokio::test]
async fn a_backend_certificate_no_root_vouches_for_is_refused() {
    let (acceptor, _) = tls_pair();
    let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let (uri, _seen) = backend_on(vec![ok], 4096, Some(acceptor)).await;
    // The gateway's connector trusts the bundled public roots, which did not sign it.
    match client()
        .send(post(&uri, "{}").req())
        .await
        .map(|r| r.status())
    {
        Err(Error::Connect(e)) => {
            assert!(e.to_lowercase().contains("certificate"), "{e}")
        }
        other => panic!("expected the certificate refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_body_until_close_ends_with_the_connection_and_is_not_kept() {
    let (uri, _seen) = backend(vec![b"HTTP/1.1 200 OK\r\n\r\nall of it"], 3).await;
    let c = client();
    let resp = c.send(post(&uri, "{}").req()).await.unwrap();
    let body = tokio::time::timeout(Duration::from_secs(5), async {
        // The backend's task ends after its one answer, closing the connection.
        text(resp).await
    });
    assert_eq!(body.await.unwrap().unwrap(), "all of it");
    assert!(
        c.shared
            .pools
            .iter()
            .all(|p| p.idle.lock().unwrap().is_empty())
    );
}

fn idle(c: &Client) -> usize {
    c.shared
        .pools
        .iter()
        .map(|p| p.idle.lock().unwrap().len())
        .sum()
}

#[tokio::test]
async fn only_a_whole_unambiguous_keep_alive_response_gives_its_connection_back() {
    let kept: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let not_kept: [&'static [u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    ];
    for answer in not_kept {
        let (uri, _seen) = backend(vec![answer], 4096).await;
        let c = client();
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "ok");
        assert_eq!(idle(&c), 0, "{}", String::from_utf8_lossy(answer));
    }
    let (uri, _seen) = backend(vec![kept], 4096).await;
    let c = client();
    let resp = c.send(post(&uri, "{}").req()).await.unwrap();
    assert_eq!(text(resp).await.unwrap(), "ok");
    assert_eq!(idle(&c), 1);
}

#[tokio::test]
async fn an_empty_body_gives_its_connection_back_unread() {
    let accepted: &[u8] = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
    let (uri, mut seen) = backend(vec![accepted, accepted], 4096).await;
    let c = client();
    for _ in 0..2 {
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        drop(resp);
        assert_eq!(idle(&c), 1);
        assert!(seen.recv().await.is_some());
    }
}

#[tokio::test]
async fn a_closed_kept_connection_is_replaced_before_use() {
    // Each connection answers once, then the backend closes it.
    let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let (uri, _seen) = backend(vec![sized], 4096).await;
    let c = client();
    for _ in 0..3 {
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "ok");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_head_keeps_the_headers_read_and_frames_by_names_in_any_case() {
    let wire: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
        Cache-Control: no-cache\r\nMCP-Session-Id: s1\r\n\
        Transfer-Encoding: gzip, Chunked\r\nDate: x\r\n\r\nrest";
    let head = parse_head(wire).unwrap().unwrap();
    assert_eq!(head.len, wire.len() - "rest".len());
    let kept: Vec<_> = head
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
        .collect();
    assert_eq!(
        kept,
        [
            ("content-type", "text/event-stream"),
            ("mcp-session-id", "s1")
        ]
    );
    assert_eq!(head.framing, (Framing::Chunked(Chunk::Size), true));
    let sized = parse_head(b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 7\r\nConnection: Close\r\n\r\n");
    assert_eq!(sized.unwrap().unwrap().framing, (Framing::Length(7), false));
    let partial = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: a");
    assert!(partial.unwrap().is_none());
}

#[tokio::test]
async fn bad_responses_fail_with_a_reason() {
    let cases: [(&'static [u8], &str); 6] = [
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "invalid chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n",
            "longer than its size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
            "middle of a response body",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nabc",
            "conflicting Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "invalid Content-Length",
        ),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "malformed response head"),
    ];
    for (answer, why) in cases {
        let (uri, _seen) = backend(vec![answer], 4096).await;
        let outcome = match client().send(post(&uri, "{}").req()).await {
            Ok(resp) => text(resp).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let err = outcome.expect_err(why);
        assert!(err.contains(why), "{err} should say {why}");
    }
}

#[tokio::test]
async fn a_head_over_the_limit_is_refused() {
    let mut long = b"HTTP/1.1 200 OK\r\nx-pad: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 2000));
    long.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
    let long: &'static [u8] = long.leak();
    // Whole in one read, or a byte at a time until the limit is reached.
    for piece in [4096, 1] {
        let (uri, _seen) = backend(vec![long], piece).await;
        assert_eq!(
            client().send(post(&uri, "{}").req()).await.unwrap_err(),
            Error::HeadTooLarge(1024)
        );
    }
}

#[tokio::test]
async fn no_listener_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri: Uri = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(listener);
    assert!(matches!(
        client().send(post(&uri, "{}").req()).await,
        Err(Error::Connect(_))
    ));
}

#[test]
fn chunk_sizes_are_hex_with_optional_extensions() {
    assert_eq!(chunk_size(b"1a").unwrap(), 26);
    assert_eq!(chunk_size(b"A ; name=value").unwrap(), 10);
    assert_eq!(chunk_size(b"0").unwrap(), 0);
    for bad in [&b""[..], b"g", b"-1", b"1 2", b"1234567890abcdef0"] {
        assert!(chunk_size(bad).is_err(), "{bad:?}");
    }
}
