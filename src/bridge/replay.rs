//! Replay mode: a call that keeps nothing in memory between rounds. When it needs input, the
//! answers given so far and the new questions are sealed into requestState as a transcript
//! ([`seal::Transcript`]) and the upstream call is cancelled. On the retry, any replica runs the
//! call again and answers the backend's pushes from the transcript, matched by method and the
//! input request's digest; a push the transcript does not hold, once every answer was used,
//! is a new round. Anything else (the backend asks something different, earlier) is refused.
//!
//! This module also owns the policy choice (`hold`, `replay`, `auto` from tool annotations,
//! read from the backend's tool list kept by `tools`).

use super::{Bridge, Request, tools};
use crate::config::Policy;
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS};
use crate::protocol::input::{self, Kind};
use crate::seal::{self, Digest, Turn};
use serde_json::{Map, Value};

/// The digest a push is matched by: the input request as the client sees it (method and
/// params, without `_meta`), canonical because serde_json maps are ordered by key.
pub(super) fn ask_digest(request: &Value) -> Digest {
    seal::digest(&serde_json::to_vec(request).expect("JSON values serialize"))
}

/// How a push from the re-run backend relates to the transcript.
#[derive(Debug, PartialEq)]
pub(super) enum Match {
    /// Answered before: write this answer upstream.
    Answer(Value),
    /// Asked before and still unanswered: ask the client again under the same key.
    Ask(String),
    /// Every earlier answer has been used: a new question, for a new round.
    New,
    /// The backend asks something the transcript does not hold while earlier answers are unused.
    Mismatch,
}

/// A transcript being replayed.
#[derive(Debug, Default)]
pub(super) struct Run {
    turns: Vec<Turn>,
    used: Vec<bool>,
}

impl Run {
    pub(super) fn new(turns: Vec<Turn>) -> Run {
        let used = vec![false; turns.len()];
        Run { turns, used }
    }

    pub(super) fn match_push(&mut self, method: &str, ask: &Digest) -> Match {
        let found = self
            .turns
            .iter()
            .enumerate()
            .position(|(i, t)| !self.used[i] && t.method == method && &t.ask == ask);
        if let Some(i) = found {
            self.used[i] = true;
            return match &self.turns[i].answer {
                Some(answer) => Match::Answer(answer.clone()),
                None => Match::Ask(self.turns[i].key.clone()),
            };
        }
        let answers_left = self
            .turns
            .iter()
            .zip(&self.used)
            .any(|(t, used)| t.answer.is_some() && !used);
        if answers_left {
            Match::Mismatch
        } else {
            Match::New
        }
    }

    /// The answered turns the backend asked for again, in transcript order: they carry over.
    pub(super) fn answered(&self) -> impl Iterator<Item = &Turn> {
        self.turns
            .iter()
            .zip(&self.used)
            .filter(|(t, used)| **used && t.answer.is_some())
            .map(|(t, _)| t)
    }
}

/// The error a retry gets when the backend no longer asks what the transcript answers.
pub(super) fn mismatch(backend: &str) -> ErrorObject {
    ErrorObject::new(
        jsonrpc::BACKEND_FAILED,
        format!(
            "backend `{backend}` asked for different input than before, so this call cannot be replayed: issue the request again without requestState"
        ),
    )
}

/// Decides, before the call is sent, whether it runs in replay mode. `auto` reads the tool's
/// annotations from the backend's tool list (`tools::catalog`); a list that cannot be had
/// holds the call.
pub(super) async fn chosen(bridge: &Bridge, backend: usize, req: &Request) -> bool {
    let tool = req.params.get("name").and_then(Value::as_str);
    match bridge.config.backends[backend]
        .replay
        .for_request(&req.method, tool)
    {
        Policy::Hold => false,
        Policy::Replay => true,
        Policy::Auto => {
            let Some(tool) = tool else { return false };
            match tools::catalog(bridge, backend, req).await {
                Ok(catalog) => catalog.tool(tool).is_some_and(|t| t.replayable),
                Err(why) => {
                    let backend = &bridge.config.backends[backend].name;
                    tracing::info!(%backend, "no tool annotations ({why}); holding the call");
                    false
                }
            }
        }
    }
}

/// Why a retry's answers cannot go into its transcript.
#[derive(Debug)]
pub(super) enum Unanswerable {
    /// A turn names no input method: the state is not one the gateway sealed.
    Malformed,
    /// An answer of the wrong shape for its kind: the client's error.
    Invalid(ErrorObject),
}

/// Takes a retry's answers into the transcript's open turns (the state was checked already,
/// see `retry`). Keys the retry does not answer are asked again when the backend gets there.
pub(super) fn take_answers(
    mut turns: Vec<Turn>,
    mut responses: Map<String, Value>,
) -> Result<Vec<Turn>, Unanswerable> {
    for turn in turns.iter_mut().filter(|t| t.answer.is_none()) {
        let Some(answer) = responses.remove(&turn.key) else {
            continue;
        };
        let kind = Kind::from_method(&turn.method).ok_or(Unanswerable::Malformed)?;
        input::validate_response(kind, &answer).map_err(|why| {
            Unanswerable::Invalid(ErrorObject::new(
                INVALID_PARAMS,
                format!("inputResponses[\"{}\"]: {why}", turn.key),
            ))
        })?;
        turn.answer = Some(answer);
    }
    Ok(turns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(key: &str, method: &str, ask: &str, answer: Option<Value>) -> Turn {
        Turn {
            key: key.into(),
            method: method.into(),
            ask: seal::digest(ask.as_bytes()),
            answer,
        }
    }

    const E: &str = "elicitation/create";
    const S: &str = "sampling/createMessage";

    #[test]
    fn pushes_match_by_method_and_digest_in_any_order() {
        let mut run = Run::new(vec![
            turn("elicitation-1", E, "a", Some(json!(1))),
            turn("sampling-2", S, "b", Some(json!(2))),
        ]);
        assert_eq!(
            run.match_push(S, &seal::digest(b"b")),
            Match::Answer(json!(2))
        );
        assert_eq!(
            run.match_push(E, &seal::digest(b"a")),
            Match::Answer(json!(1))
        );
        assert_eq!(run.match_push(E, &seal::digest(b"c")), Match::New);
        assert_eq!(run.answered().count(), 2);
    }

    #[test]
    fn a_different_question_before_the_answers_are_used_is_a_mismatch() {
        let mut run = Run::new(vec![turn("elicitation-1", E, "a", Some(json!(1)))]);
        assert_eq!(run.match_push(E, &seal::digest(b"x")), Match::Mismatch);
        assert_eq!(run.match_push(S, &seal::digest(b"a")), Match::Mismatch);
    }

    #[test]
    fn unanswered_turns_are_asked_again_under_their_key() {
        let mut run = Run::new(vec![
            turn("elicitation-1", E, "a", Some(json!(1))),
            turn("elicitation-2", E, "b", None),
        ]);
        assert_eq!(
            run.match_push(E, &seal::digest(b"a")),
            Match::Answer(json!(1))
        );
        assert_eq!(
            run.match_push(E, &seal::digest(b"b")),
            Match::Ask("elicitation-2".into())
        );
        assert_eq!(run.answered().count(), 1);
    }
}
