//! Rate control for background work: a token bucket in bytes, with an injected
//! clock so its accuracy is tested over hours of simulated time in milliseconds.
//!
//! Why a token bucket: a reclaim policy is "N MB/s, plus a burst spent first that
//! refills while idle" (seed 000). Tokens accrue at the rate up to the burst plus
//! a tenth of a second's worth (so a worker that polls every few milliseconds
//! never loses what accrued between polls, and a burst of zero still lets work
//! through); work takes tokens before it runs and waits when there are none.
//! Over an interval T the work done is at most rate × (T + 0.1 s) + burst (plus
//! 4 KiB at very slow rates), and —
//! when there is always work — no less than rate × T + burst less one step.
//! (The slack is kept small on purpose: an idle bucket must not hand out much
//! more than the configured burst.)

use std::time::Duration;

/// Bytes per MB as the seeds count reclaim rates (decimal megabytes, like ESXi).
pub const BYTES_PER_MB: u64 = 1_000_000;
/// Least slack above the burst: one 4 KiB grain.
const SLACK_MIN_BYTES: u64 = 4096;
/// `low` in seed 000: 25 MB/s.
pub const LOW_RATE_BYTES_PER_S: u64 = 25 * BYTES_PER_MB;

/// A source of monotonic time. The engine uses the real clock; tests step a
/// simulated one.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// The real monotonic clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to: tests of rate control step it.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).expect("steps fit u64 nanoseconds");
        self.nanos
            .fetch_add(nanos, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// How fast background work of one kind may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// No work at all: a backlog accrues.
    Off,
    /// At most this many bytes per second.
    BytesPerSecond(u64),
    /// As fast as the work goes.
    Unlimited,
}

/// A token bucket holding at most `burst_bytes`, filled at the rate.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Rate,
    burst_bytes: u64,
    /// Tokens available, in bytes (fractions kept in `fraction_nanos`).
    tokens_bytes: u64,
    /// Sub-byte remainder of the accrual, in byte-nanoseconds, so slow rates and
    /// frequent refills lose nothing to rounding.
    fraction: u128,
    last_refill: Duration,
}

impl TokenBucket {
    /// A bucket that starts full (the burst is available at once).
    pub fn new(rate: Rate, burst_bytes: u64, now: Duration) -> Self {
        TokenBucket {
            rate,
            burst_bytes,
            tokens_bytes: burst_bytes,
            fraction: 0,
            last_refill: now,
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    /// Changes the policy; tokens already accrued are kept (up to the new burst).
    pub fn set_policy(&mut self, rate: Rate, burst_bytes: u64, now: Duration) {
        self.refill(now);
        self.rate = rate;
        self.burst_bytes = burst_bytes;
        self.tokens_bytes = self.tokens_bytes.min(self.capacity_bytes());
    }

    /// Most tokens the bucket holds: the burst plus a tenth of a second at the
    /// rate (at least a grain, so a slow rate with no burst still fits a step).
    fn capacity_bytes(&self) -> u64 {
        match self.rate {
            Rate::BytesPerSecond(rate) => self
                .burst_bytes
                .saturating_add((rate / 10).max(SLACK_MIN_BYTES)),
            _ => self.burst_bytes,
        }
    }

    fn refill(&mut self, now: Duration) {
        let elapsed = now.saturating_sub(self.last_refill);
        self.last_refill = self.last_refill.max(now);
        let Rate::BytesPerSecond(rate) = self.rate else {
            return;
        };
        let accrued = u128::from(rate) * elapsed.as_nanos() + self.fraction;
        let whole = accrued / 1_000_000_000;
        self.fraction = accrued % 1_000_000_000;
        let whole = u64::try_from(whole).unwrap_or(u64::MAX);
        let capacity = self.capacity_bytes();
        self.tokens_bytes = self.tokens_bytes.saturating_add(whole).min(capacity);
        if self.tokens_bytes == capacity {
            // A full bucket stores nothing more, fractions included.
            self.fraction = 0;
        }
    }

    /// How many of `wanted_bytes` may be worked now (and takes them). A step may
    /// be larger than the burst: it then takes whatever is there, at least one
    /// byte's worth, so big steps still progress at the rate on average.
    pub fn take(&mut self, wanted_bytes: u64, now: Duration) -> u64 {
        self.refill(now);
        match self.rate {
            Rate::Off => 0,
            Rate::Unlimited => wanted_bytes,
            Rate::BytesPerSecond(_) => {
                let granted = wanted_bytes.min(self.tokens_bytes);
                self.tokens_bytes -= granted;
                granted
            }
        }
    }

    /// Gives back tokens taken for work that turned out smaller (up to the
    /// bucket's capacity).
    pub fn refund(&mut self, bytes: u64) {
        if let Rate::BytesPerSecond(_) = self.rate {
            self.tokens_bytes = self
                .tokens_bytes
                .saturating_add(bytes)
                .min(self.capacity_bytes());
        }
    }

    /// How long until `bytes` tokens are available (zero when they are; `None`
    /// when they never will be).
    pub fn wait_for(&mut self, bytes: u64, now: Duration) -> Option<Duration> {
        self.refill(now);
        match self.rate {
            Rate::Off => None,
            Rate::Unlimited => Some(Duration::ZERO),
            Rate::BytesPerSecond(0) => None,
            Rate::BytesPerSecond(rate) => {
                let missing = bytes
                    .min(self.capacity_bytes())
                    .saturating_sub(self.tokens_bytes);
                let nanos = (u128::from(missing) * 1_000_000_000)
                    .saturating_sub(self.fraction)
                    .div_ceil(u128::from(rate));
                Some(Duration::from_nanos(
                    u64::try_from(nanos).unwrap_or(u64::MAX),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a worker that always has work, in steps of `step_bytes`, for
    /// `seconds` of simulated time with a refill every `tick`; returns the bytes
    /// worked.
    fn simulate(
        rate: Rate,
        burst_bytes: u64,
        step_bytes: u64,
        seconds: u64,
        tick: Duration,
    ) -> u64 {
        let mut now = Duration::ZERO;
        let mut bucket = TokenBucket::new(rate, burst_bytes, now);
        let end = Duration::from_secs(seconds);
        let mut worked = 0u64;
        while now < end {
            worked += bucket.take(step_bytes, now);
            now += tick;
        }
        worked
    }

    fn within_5_percent(got: u64, expected: u64) -> bool {
        let expected = expected as f64;
        (got as f64 - expected).abs() <= 0.05 * expected
    }

    #[test]
    fn low_rate_over_an_hour_matches_rate_times_time_plus_burst() {
        let burst = 100 * BYTES_PER_MB;
        let got = simulate(
            Rate::BytesPerSecond(LOW_RATE_BYTES_PER_S),
            burst,
            4 * 1024 * 1024,
            3600,
            Duration::from_millis(10),
        );
        let expected = LOW_RATE_BYTES_PER_S * 3600 + burst;
        assert!(within_5_percent(got, expected), "{got} vs {expected}");
    }

    #[test]
    fn fixed_rates_far_above_a_gigabyte_per_second_are_honoured() {
        for mb_per_s in [1, 2000, 10_000, 100_000] {
            let rate = mb_per_s * BYTES_PER_MB;
            let burst = 16 * BYTES_PER_MB;
            let got = simulate(
                Rate::BytesPerSecond(rate),
                burst,
                1 << 30,
                600,
                Duration::from_millis(1),
            );
            let expected = rate * 600 + burst;
            assert!(
                within_5_percent(got, expected),
                "{mb_per_s} MB/s: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn burst_is_spent_first_and_refills_while_idle() {
        let rate = 10 * BYTES_PER_MB;
        let burst = 400 * BYTES_PER_MB;
        let mut now = Duration::ZERO;
        let mut bucket = TokenBucket::new(Rate::BytesPerSecond(rate), burst, now);
        // The whole burst at once.
        assert_eq!(bucket.take(u64::MAX, now), burst);
        assert_eq!(bucket.take(u64::MAX, now), 0);
        // Then the rate: one second gives 10 MB.
        now += Duration::from_secs(1);
        assert_eq!(bucket.take(u64::MAX, now), rate);
        // Idle for a minute: refilled up to the burst plus a tenth of a second,
        // no more.
        now += Duration::from_secs(60);
        assert_eq!(bucket.take(u64::MAX, now), burst + rate / 10);
        // The wait for the next 5 MB is half a second.
        assert_eq!(
            bucket.wait_for(5 * BYTES_PER_MB, now),
            Some(Duration::from_millis(500))
        );
    }

    #[test]
    fn off_accrues_nothing_and_unlimited_grants_everything() {
        let mut now = Duration::ZERO;
        let mut off = TokenBucket::new(Rate::Off, 1 << 20, now);
        now += Duration::from_secs(3600);
        assert_eq!(off.take(1 << 30, now), 0);
        assert_eq!(off.wait_for(1, now), None);
        let mut unlimited = TokenBucket::new(Rate::Unlimited, 0, now);
        assert_eq!(unlimited.take(1 << 40, now), 1 << 40);
        // Turning a policy on keeps the burst credit it held, and accrues from then.
        off.set_policy(Rate::BytesPerSecond(BYTES_PER_MB), 8 << 20, now);
        now += Duration::from_secs(1);
        assert_eq!(off.take(u64::MAX, now), (1 << 20) + BYTES_PER_MB);
    }

    #[test]
    fn slow_rates_lose_nothing_to_rounding() {
        // 1 byte per second, refilled every millisecond, for a day.
        let got = simulate(
            Rate::BytesPerSecond(1),
            0,
            1,
            86_400,
            Duration::from_millis(1),
        );
        assert!((86_399..=86_400).contains(&got), "{got}");
    }
}
