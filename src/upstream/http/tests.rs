//! Unit tests of the HTTP transports' pure parts.

use super::streams::Cursor;
use crate::upstream::session::Mark;

#[test]
fn an_event_id_that_cannot_be_sent_back_leaves_no_point_to_resume_from() {
    let mark: Mark = Default::default();
    let mut cursor = Cursor {
        mark: Some(mark.clone()),
        ..Cursor::default()
    };
    cursor.passed("e1".into());
    assert_eq!(cursor.last_id.as_deref(), Some("e1"));
    assert_eq!(mark.lock().unwrap().as_deref(), Some("e1"));
    cursor.passed("e\u{1}2".into());
    assert_eq!(cursor.last_id, None);
    assert_eq!(*mark.lock().unwrap(), None);
}
