//! The park registry: park id -> the task that holds a suspended call, plus the counters that
//! bound parked calls per principal and in total.

use crate::jsonrpc::ErrorObject;
use crate::seal::{Digest, ParkId};
use dashmap::DashMap;
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

use super::Reply;
use crate::protocol::caps::Declared;
use crate::protocol::meta::RequestMeta;

/// A retry, handed to the task that holds the park.
#[derive(Debug)]
pub struct Resume {
    pub round: u32,
    pub responses: Map<String, Value>,
    pub meta: RequestMeta,
    pub declared: Declared,
    pub reply: mpsc::Sender<Reply>,
}

/// Where a retry is handed to its parked call. It holds a way in only while the call waits for
/// a retry of its current round, and the first such retry to take it is the one the call gets:
/// another that arrives meanwhile finds it empty, and a retry of another round (a stale state
/// sent again) is turned away without taking it. (A one-shot hand-over per wait rather than a
/// channel: a tokio channel allocates room for 32 messages up front, and every parked call
/// would keep one.)
#[derive(Debug, Default)]
pub struct Door(Mutex<Option<(u32, oneshot::Sender<Box<Resume>>)>>);

impl Door {
    /// Opens the door for the next retry of `round`; the call waits on what it returns.
    pub fn open(&self, round: u32) -> oneshot::Receiver<Box<Resume>> {
        let (tx, rx) = oneshot::channel();
        *self.0.lock().expect("door lock") = Some((round, tx));
        rx
    }

    /// Closes the door: retries that come later find no way in.
    pub fn close(&self) {
        self.0.lock().expect("door lock").take();
    }

    /// Hands a retry to the call; gives it back if the call is not waiting for one of its
    /// round (it is running a round, another retry got in first, it has ended, or the retry
    /// answers another round).
    pub fn hand_over(&self, resume: Box<Resume>) -> Result<(), Box<Resume>> {
        let mut way_in = self.0.lock().expect("door lock");
        if way_in
            .as_ref()
            .is_none_or(|(round, _)| *round != resume.round)
        {
            return Err(resume);
        }
        let (_, tx) = way_in.take().expect("checked above");
        drop(way_in);
        tx.send(resume)
    }
}

#[derive(Debug, Clone)]
pub struct Handle {
    pub resume: Arc<Door>,
    /// The backend the call runs on: a state opens only at that backend's endpoint.
    pub backend: usize,
}

#[derive(Debug, Default)]
pub struct Registry {
    parks: DashMap<ParkId, Handle>,
    per_principal: DashMap<Digest, usize>,
    total: AtomicUsize,
}

/// Why a call could not be parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Principal,
    Total,
}

impl Full {
    pub fn to_error(self) -> ErrorObject {
        let what = match self {
            Full::Principal => "this principal has too many calls waiting for input",
            Full::Total => "the gateway has too many calls waiting for input",
        };
        ErrorObject::new(crate::jsonrpc::BACKEND_BUSY, what)
    }
}

/// A park's place in the registry; freed on drop, so every exit path frees it.
#[derive(Debug)]
pub struct Entry {
    registry: Arc<Registry>,
    pub id: ParkId,
    principal: Digest,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.registry.parks.remove(&self.id);
        self.registry.total.fetch_sub(1, Ordering::AcqRel);
        if let dashmap::Entry::Occupied(mut e) = self.registry.per_principal.entry(self.principal) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

impl Registry {
    /// Takes a place for a new park, within the limits.
    pub fn insert(
        self: &Arc<Self>,
        principal: Digest,
        handle: Handle,
        per_principal: usize,
        total: usize,
    ) -> Result<Entry, Full> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Total);
        }
        {
            let mut count = self.per_principal.entry(principal).or_insert(0);
            if *count >= per_principal {
                drop(count);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Full::Principal);
            }
            *count += 1;
        }
        let id = ParkId::random();
        self.parks.insert(id, handle);
        Ok(Entry {
            registry: self.clone(),
            id,
            principal,
        })
    }

    /// Whether a new park for `principal` would be refused now (checked before a call takes a
    /// backend session, so a principal at its limit cannot make the gateway start sessions).
    pub fn full(&self, principal: &Digest, per_principal: usize, total: usize) -> Option<Full> {
        if self.total.load(Ordering::Acquire) >= total {
            return Some(Full::Total);
        }
        let held = self.per_principal.get(principal).map_or(0, |c| *c);
        (held >= per_principal).then_some(Full::Principal)
    }

    pub fn get(&self, id: &ParkId) -> Option<Handle> {
        self.parks.get(id).map(|h| h.clone())
    }

    pub fn len(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> Handle {
        Handle {
            resume: Arc::default(),
            backend: 0,
        }
    }

    fn resume(round: u32) -> Box<Resume> {
        Box::new(Resume {
            round,
            responses: Map::new(),
            meta: RequestMeta::default(),
            declared: Declared::default(),
            reply: mpsc::channel(1).0,
        })
    }

    #[test]
    fn the_door_lets_in_one_retry_per_opening_and_none_while_closed() {
        let door = Door::default();
        assert_eq!(
            door.hand_over(resume(1)).unwrap_err().round,
            1,
            "never opened"
        );
        let mut rx = door.open(2);
        door.hand_over(resume(2))
            .expect("open: the first retry gets in");
        assert_eq!(door.hand_over(resume(2)).unwrap_err().round, 2, "taken");
        assert_eq!(rx.try_recv().expect("handed over").round, 2);
        let rx = door.open(3);
        door.close();
        assert_eq!(door.hand_over(resume(3)).unwrap_err().round, 3, "closed");
        drop(rx);
        door.open(3);
        drop(door.open(3));
        assert_eq!(
            door.hand_over(resume(3)).unwrap_err().round,
            3,
            "the call stopped waiting"
        );
    }

    #[test]
    fn a_retry_of_another_round_leaves_the_door_open_for_the_current_one() {
        let door = Door::default();
        let mut rx = door.open(2);
        assert_eq!(door.hand_over(resume(1)).unwrap_err().round, 1, "stale");
        door.hand_over(resume(2))
            .expect("the current round still gets in");
        assert_eq!(rx.try_recv().expect("handed over").round, 2);
    }

    #[test]
    fn limits_hold_per_principal_and_in_total() {
        let reg = Arc::new(Registry::default());
        let alice = crate::seal::digest(b"alice");
        let bob = crate::seal::digest(b"bob");
        let a1 = reg.insert(alice, handle(), 2, 3).unwrap();
        let _a2 = reg.insert(alice, handle(), 2, 3).unwrap();
        assert_eq!(
            reg.insert(alice, handle(), 2, 3).unwrap_err(),
            Full::Principal
        );
        let _b1 = reg.insert(bob, handle(), 2, 3).unwrap();
        assert_eq!(reg.insert(bob, handle(), 2, 3).unwrap_err(), Full::Total);
        assert!(reg.get(&a1.id).is_some());
        let id = a1.id;
        drop(a1);
        assert!(reg.get(&id).is_none());
        assert_eq!(reg.len(), 2);
        let _a3 = reg.insert(alice, handle(), 2, 3).unwrap();
        assert_eq!(reg.full(&alice, 2, 4), Some(Full::Principal));
        assert_eq!(reg.full(&bob, 2, 3), Some(Full::Total));
        assert_eq!(reg.full(&bob, 2, 4), None);
    }
}
