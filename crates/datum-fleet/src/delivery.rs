//! Delivering an outbox: oldest report first, one at a time, each removed
//! only once the server said it holds it.
//!
//! The guarantees, and why they hold:
//! - **Nothing lost.** A report is written to the outbox (a durable table
//!   in the state store) before any delivery is tried, and leaves it only
//!   after a 2xx answer. A host killed mid-delivery finds the report still
//!   queued; a server down for an hour leaves the queue growing, within the
//!   outbox limit (beyond it the oldest are dropped and the count travels
//!   with the next delivery, so even that is never silent).
//! - **Nothing duplicated.** Every report carries an idempotency key drawn
//!   when it was queued. A reply lost on the way back (the server restarted
//!   after committing, a timeout) makes the host send the same key again,
//!   and the server answers "duplicate" without storing a second copy.
//! - **In order.** The head of the queue blocks the rest: report `n + 1`
//!   is not sent before report `n` is held, so the server's "last report"
//!   is the host's last report.
//! - **Retries with backoff.** A failed attempt pushes the next one out
//!   (2 s, doubling to 5 min, with jitter so a fleet does not retry in
//!   step; never sooner than the server's `Retry-After`). The backoff is
//!   kept in the outbox too, so a cron-driven host does not hammer a down
//!   server every minute either.
//! - **A report the server refuses for good** (malformed, too large) is
//!   set aside (counted, with the reason) rather than blocking the queue
//!   forever; refused credentials are not such a case (everything stays).
//!
//! Owns: [`Queue`] (what an outbox must offer), [`deliver`], [`Backoff`].
//! Must not: know how the outbox is stored (SQLite in `datum-store`) or
//! what is in a report.

use std::time::{Duration, Instant};

use crate::client::{Client, SendError};
use crate::report::Reply;

/// One queued report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The outbox's own id (its order).
    pub id: i64,
    pub key: String,
    /// The report's JSON.
    pub body: Vec<u8>,
}

/// When the next attempt may be made, and why the last one failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Failed attempts in a row.
    pub failures: u32,
    /// Unix milliseconds before which no attempt is made (0: now).
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
}

/// The first delay after a failure.
pub const FIRST_DELAY: Duration = Duration::from_secs(2);
/// The longest delay between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

impl Backoff {
    /// The delay after `failures` failed attempts in a row (before
    /// jitter): 2 s, 4 s, 8 s... up to [`MAX_DELAY`].
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        FIRST_DELAY.saturating_mul(1u32 << doublings).min(MAX_DELAY)
    }

    /// The state after one more failure at `now_ms`, `retry_after` being
    /// the server's own request, and `jitter` a number in [0, 1).
    pub fn failed(
        &self,
        now_ms: i64,
        error: String,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Backoff {
        let failures = self.failures.saturating_add(1);
        let base = Self::delay(failures).as_millis() as f64;
        // ±25%: hosts that failed together spread out.
        let ms = (base * (0.75 + 0.5 * jitter.clamp(0.0, 1.0))) as i64;
        let ms = ms.max(retry_after.map_or(0, |d| d.as_millis() as i64));
        Backoff {
            failures,
            next_attempt_ms: now_ms.saturating_add(ms),
            last_error: Some(error),
        }
    }
}

/// What an outbox offers the delivery loop. Every method is one durable
/// step: a crash between two calls loses nothing (at worst a report that
/// was delivered is delivered again, and the server ignores the repeat).
pub trait Queue {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The oldest queued report.
    fn oldest(&mut self) -> Result<Option<Queued>, Self::Error>;
    /// Reports queued.
    fn depth(&mut self) -> Result<u64, Self::Error>;
    /// Reports dropped (outbox full) and not yet announced to the server.
    fn dropped(&mut self) -> Result<u64, Self::Error>;
    /// The server holds `id`, sent with `announced_dropped` (what
    /// [`Queue::dropped`] said when it was sent) as its dropped count:
    /// remove it, clear the backoff, take `announced_dropped` off the
    /// dropped count (reports dropped while the delivery was on its way
    /// stay counted, for the next one), and remember the reply's sampling
    /// plan. One transaction.
    fn delivered(
        &mut self,
        id: i64,
        announced_dropped: u64,
        reply: &Reply,
    ) -> Result<(), Self::Error>;
    /// The server refused `id` for good: remove it and count it, with why.
    fn refused(&mut self, id: i64, why: &str) -> Result<(), Self::Error>;
    fn backoff(&mut self) -> Result<Backoff, Self::Error>;
    fn set_backoff(&mut self, backoff: &Backoff) -> Result<(), Self::Error>;
}

/// How long one call of [`deliver`] may go on, and whether it waits for
/// the backoff.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// No new request is started after this instant.
    pub until: Instant,
    /// Skip the attempt while the backoff says "not yet" (false: try once
    /// now whatever it says, e.g. `datum report --flush`).
    pub respect_backoff: bool,
}

/// What one call of [`deliver`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivered {
    pub delivered: u64,
    pub duplicates: u64,
    pub refused: Vec<String>,
    /// Reports still queued.
    pub remaining: u64,
    /// Why delivery stopped early (the server unreachable...).
    pub error: Option<String>,
    /// The credentials were refused.
    pub unauthorized: bool,
    /// The backoff said "not yet": nothing was tried.
    pub waiting: bool,
    /// The last reply (for its sampling plan).
    pub reply: Option<Reply>,
}

/// Sends the queue's reports in order until it is empty, an attempt fails,
/// or the budget runs out.
pub fn deliver<Q: Queue>(
    queue: &mut Q,
    client: &Client,
    budget: Budget,
    now_ms: impl Fn() -> i64,
) -> Result<Delivered, Q::Error> {
    let mut out = Delivered::default();
    let backoff = queue.backoff()?;
    if budget.respect_backoff && backoff.next_attempt_ms > now_ms() {
        out.waiting = true;
        out.error = backoff.last_error.clone();
        out.remaining = queue.depth()?;
        return Ok(out);
    }
    while Instant::now() < budget.until {
        let Some(head) = queue.oldest()? else { break };
        let depth = queue.depth()?.saturating_sub(1);
        let dropped = queue.dropped()?;
        match client.post_report(&head.key, &head.body, depth, dropped) {
            Ok(reply) => {
                queue.delivered(head.id, dropped, &reply)?;
                if reply.duplicate {
                    out.duplicates += 1;
                } else {
                    out.delivered += 1;
                }
                out.reply = Some(reply);
            }
            Err(SendError::Refused { status, message }) => {
                let why = format!("HTTP {status}: {message}");
                queue.refused(head.id, &why)?;
                out.refused.push(why);
            }
            Err(e) => {
                let (retry_after, unauthorized) = match &e {
                    SendError::Transient { retry_after, .. } => (*retry_after, false),
                    _ => (None, true),
                };
                let next = queue
                    .backoff()?
                    .failed(now_ms(), e.to_string(), retry_after, jitter());
                queue.set_backoff(&next)?;
                out.error = Some(e.to_string());
                out.unauthorized = unauthorized;
                break;
            }
        }
    }
    out.remaining = queue.depth()?;
    Ok(out)
}

/// A number in [0, 1) for the backoff's jitter.
fn jitter() -> f64 {
    let mut b = [0u8; 8];
    crate::random::fill(&mut b);
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        assert_eq!(Backoff::delay(1), Duration::from_secs(2));
        assert_eq!(Backoff::delay(2), Duration::from_secs(4));
        assert_eq!(Backoff::delay(5), Duration::from_secs(32));
        assert_eq!(Backoff::delay(30), MAX_DELAY);
        let b = Backoff::default().failed(1_000, "down".into(), None, 0.5);
        assert_eq!((b.failures, b.next_attempt_ms), (1, 3_000));
        let b = b.failed(1_000, "down".into(), Some(Duration::from_secs(60)), 0.0);
        assert_eq!(b.next_attempt_ms, 61_000, "Retry-After wins when longer");
        let low = Backoff::default()
            .failed(0, String::new(), None, 0.0)
            .next_attempt_ms;
        let high = Backoff::default()
            .failed(0, String::new(), None, 0.999)
            .next_attempt_ms;
        assert!(
            low == 1_500 && (2_490..=2_500).contains(&high),
            "{low} {high}"
        );
    }
}
