//! Support shared by the fuzz targets: in-memory storage behind the real protocol code,
//! the invariants every target checks beyond "no panic", and a poll loop for futures
//! that never wait (the PDU reader over a byte slice).
//!
//! Why a library: each target is a thin `fuzz_target!` that decodes its input and calls
//! in here, so the storage doubles and the checks are written once.

pub mod nbd_export;
pub mod scsi_array;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls a future that never waits (its I/O is over an in-memory slice) to completion.
/// Panics if it returns `Pending`, which would mean it waits on something that can never
/// wake it.
pub fn complete_now<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut context) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a future over an in-memory slice returned Pending"),
    }
}

/// Splits fuzz input into bounded records: a reader that never panics on short input
/// (missing bytes read as zero) so every byte string is a valid program for a target.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.bytes.split_first() else {
            return 0;
        };
        self.bytes = rest;
        first
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    /// Up to `len_bytes` bytes (fewer at the end of the input).
    pub fn take(&mut self, len_bytes: usize) -> &'a [u8] {
        let (taken, rest) = self.bytes.split_at(len_bytes.min(self.bytes.len()));
        self.bytes = rest;
        taken
    }

    pub fn rest(&mut self) -> &'a [u8] {
        self.take(self.bytes.len())
    }
}
