//! The per-address cap of a listener: how many connections each client address has open,
//! counted by the accept loop as it accepts and released as each connection ends. One address
//! with many slow connections then cannot take every permit of the listener from everyone else.
//!
//! The map holds only addresses with a connection open, so it is no larger than the listener's
//! `max_connections`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections open by address, for a listener with a per-address cap.
#[derive(Debug, Clone)]
pub(super) struct Addresses {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Addresses {
    pub(super) fn new(cap: usize) -> Addresses {
        Addresses {
            cap,
            open: Arc::default(),
        }
    }

    /// Counts a connection from `ip` until the returned guard is dropped, or `None` when that
    /// address has its cap open already. An IPv4 address mapped into IPv6 counts as itself.
    pub(super) fn admit(&self, ip: IpAddr) -> Option<Admitted> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().expect("address counts lock");
        let count = open.entry(ip).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(Admitted {
            open: self.open.clone(),
            ip,
        })
    }
}

/// One connection counted against its address.
#[derive(Debug)]
pub(super) struct Admitted {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("address counts lock");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_cap_and_a_closed_connection_frees_its_place() {
        let addresses = Addresses::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = addresses.admit(a).expect("first");
        let second = addresses
            .admit(mapped)
            .expect("second, the same address mapped");
        assert!(addresses.admit(a).is_none(), "a third is over the cap");
        let _other = addresses
            .admit(b)
            .expect("another address has its own count");
        drop(first);
        let again = addresses.admit(a).expect("room again once one has closed");
        assert!(addresses.admit(a).is_none());
        drop(again);
        drop(second);
        assert!(
            !addresses.open.lock().unwrap().contains_key(&a),
            "an address with nothing open is forgotten"
        );
    }
}
