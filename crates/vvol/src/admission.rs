//! How many requests each host may have in flight: the array advertises it
//! and answers the excess with [`VvolFault::Busy`] at once, never by queueing
//! (VASA providers that queued hung hosts after a restart, when every host
//! re-established its context together).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::fault::VvolFault;

/// Most requests one host may have in flight.
pub const MAX_REQUESTS_PER_HOST: u32 = 16;
/// Most vVols one batch call (bind, unbind, info, snapshot) takes.
pub const MAX_BATCH: usize = 1024;

#[derive(Debug, Default)]
pub struct Admission {
    in_flight: Mutex<HashMap<String, u32>>,
}

/// A request admitted; ends when dropped.
pub struct Permit<'a> {
    admission: &'a Admission,
    host: String,
}

impl Admission {
    pub fn admit(&self, host: &str) -> Result<Permit<'_>, VvolFault> {
        let mut in_flight = self.in_flight.lock();
        let count = in_flight.entry(host.to_string()).or_insert(0);
        if *count >= MAX_REQUESTS_PER_HOST {
            return Err(VvolFault::Busy(format!(
                "host '{host}' has {MAX_REQUESTS_PER_HOST} requests in flight: retry when one ends"
            )));
        }
        *count += 1;
        Ok(Permit {
            admission: self,
            host: host.to_string(),
        })
    }

    pub fn in_flight(&self, host: &str) -> u32 {
        self.in_flight.lock().get(host).copied().unwrap_or(0)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.admission.in_flight.lock();
        let count = in_flight
            .get_mut(&self.host)
            .expect("a permit's host is counted");
        *count -= 1;
        if *count == 0 {
            in_flight.remove(&self.host);
        }
    }
}

/// Refuses a batch larger than [`MAX_BATCH`] or empty.
pub fn check_batch(len: usize) -> Result<(), VvolFault> {
    if len == 0 {
        return Err(VvolFault::InvalidArgument("an empty batch".into()));
    }
    if len > MAX_BATCH {
        return Err(VvolFault::OutOfResource(format!(
            "a batch of {len}: at most {MAX_BATCH}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_past_the_limit_is_busy_and_a_finished_one_frees_a_place() {
        let admission = Admission::default();
        let permits: Vec<_> = (0..MAX_REQUESTS_PER_HOST)
            .map(|_| admission.admit("esx1").unwrap())
            .collect();
        assert!(matches!(admission.admit("esx1"), Err(VvolFault::Busy(_))));
        assert!(admission.admit("esx2").is_ok(), "hosts are counted apart");
        drop(permits.into_iter().next());
        assert!(admission.admit("esx1").is_ok());
        assert!(check_batch(MAX_BATCH + 1).is_err());
        assert!(check_batch(0).is_err());
    }
}
