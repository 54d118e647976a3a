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
//! - **Every dropped report announced once.** The dropped count a report
//!   carries is fixed at its first attempt ([`Queue::announce`]) and sent
//!   again unchanged with every repeat: the server adds a report's count
//!   only when it stores the report, so whichever attempt it stored, the
//!   count was added once, and reports dropped meanwhile travel with the
//!   next report. A report once sent is never the one dropped (the server
//!   may hold it already).
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
//!   One holding a field only newer servers take (the pass's warnings,
//!   queued after a newer server's reply) that a server refuses as
//!   unreadable (400) is first sent again without it
//!   ([`crate::report::without_optional_fields`]).
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
    /// The state store it was made in (sent as
    /// [`crate::client::STORE_ID_HEADER`]), when the queue knows.
    pub store: Option<u128>,
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
    /// Reports dropped (outbox full) and not yet handed to a report to
    /// announce ([`Queue::announce`]).
    fn dropped(&mut self) -> Result<u64, Self::Error>;
    /// The dropped count report `id` carries to the server, the same on
    /// every attempt: the first time it is asked, the count of
    /// [`Queue::dropped`] is handed to `id` (and taken off it, in one
    /// transaction); afterwards it is that count again. The server takes a
    /// report's count only with a key it does not hold yet (a duplicate's
    /// is ignored), so whichever attempt it stored, it counted exactly
    /// that, once, even when its reply was lost. From then on `id` is
    /// never the report dropped when the outbox is full (the server may
    /// hold it already). `None`: `id` is no longer queued (dropped before
    /// it was sent).
    fn announce(&mut self, id: i64) -> Result<Option<u64>, Self::Error>;
    /// The server holds `id` (stored now, or a duplicate of an attempt
    /// whose reply was lost), and with it the count [`Queue::announce`]
    /// handed it: remove it, clear the backoff, and remember the reply's
    /// sampling plan. One transaction.
    fn delivered(&mut self, id: i64, reply: &Reply) -> Result<(), Self::Error>;
    /// The server refused `id` for good: remove it and count it, with why;
    /// the dropped count it carried is announced with the next report (the
    /// server took none of it).
    fn refused(&mut self, id: i64, why: &str) -> Result<(), Self::Error>;
    fn backoff(&mut self) -> Result<Backoff, Self::Error>;
    fn set_backoff(&mut self, backoff: &Backoff) -> Result<(), Self::Error>;
}

/// Where [`deliver`] sends a report: the HTTPS [`Client`], or a stand-in
/// server in tests.
pub trait Transport {
    /// Delivers one report, as [`Client::post_report`]: `Ok` means the
    /// server holds it (now, or from an earlier delivery of the same key).
    fn post_report(
        &self,
        key: &str,
        body: &[u8],
        depth: u64,
        dropped: u64,
        store: Option<u128>,
    ) -> Result<Reply, SendError>;
}

impl Transport for Client {
    fn post_report(
        &self,
        key: &str,
        body: &[u8],
        depth: u64,
        dropped: u64,
        store: Option<u128>,
    ) -> Result<Reply, SendError> {
        Client::post_report_of(self, key, body, depth, dropped, store)
    }
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
pub fn deliver<Q: Queue, T: Transport + ?Sized>(
    queue: &mut Q,
    client: &T,
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
        // A pass may have dropped it (outbox full) since it was read.
        let Some(dropped) = queue.announce(head.id)? else {
            continue;
        };
        let depth = queue.depth()?.saturating_sub(1);
        let mut sent = client.post_report(&head.key, &head.body, depth, dropped, head.store);
        // Refused as unreadable while holding a field only newer servers
        // take (queued after a newer server's reply; this one is older):
        // once more without it, rather than set aside for good. The
        // server stored nothing of the refused attempt.
        if let Err(SendError::Refused { status: 400, .. }) = &sent
            && let Some(older) = crate::report::without_optional_fields(&head.body)
        {
            sent = client.post_report(&head.key, &older, depth, dropped, head.store);
        }
        match sent {
            Ok(reply) => {
                queue.delivered(head.id, &reply)?;
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

    /// An outbox in memory, keeping [`Queue`]'s contract.
    #[derive(Default)]
    struct Memory {
        /// Queued reports, oldest first, with the count handed to each.
        rows: Vec<(Queued, Option<u64>)>,
        dropped: u64,
        backoff: Backoff,
    }

    impl Memory {
        fn with(keys: &[&str], dropped: u64) -> Self {
            let rows = keys
                .iter()
                .zip(1..)
                .map(|(k, id)| {
                    let q = Queued {
                        id,
                        key: (*k).to_owned(),
                        body: b"{}".to_vec(),
                        store: None,
                    };
                    (q, None)
                })
                .collect();
            Memory {
                rows,
                dropped,
                ..Memory::default()
            }
        }

        fn remove(&mut self, id: i64) -> Option<Option<u64>> {
            let at = self.rows.iter().position(|(q, _)| q.id == id)?;
            Some(self.rows.remove(at).1)
        }
    }

    impl Queue for Memory {
        type Error = std::io::Error;
        fn oldest(&mut self) -> Result<Option<Queued>, Self::Error> {
            Ok(self.rows.first().map(|(q, _)| q.clone()))
        }
        fn depth(&mut self) -> Result<u64, Self::Error> {
            Ok(self.rows.len() as u64)
        }
        fn dropped(&mut self) -> Result<u64, Self::Error> {
            Ok(self.dropped)
        }
        fn announce(&mut self, id: i64) -> Result<Option<u64>, Self::Error> {
            let dropped = &mut self.dropped;
            Ok(self
                .rows
                .iter_mut()
                .find(|(q, _)| q.id == id)
                .map(|(_, n)| *n.get_or_insert_with(|| std::mem::take(dropped))))
        }
        fn delivered(&mut self, id: i64, _reply: &Reply) -> Result<(), Self::Error> {
            self.remove(id);
            self.backoff = Backoff::default();
            Ok(())
        }
        fn refused(&mut self, id: i64, _why: &str) -> Result<(), Self::Error> {
            if let Some(Some(n)) = self.remove(id) {
                self.dropped += n;
            }
            Ok(())
        }
        fn backoff(&mut self) -> Result<Backoff, Self::Error> {
            Ok(self.backoff.clone())
        }
        fn set_backoff(&mut self, b: &Backoff) -> Result<(), Self::Error> {
            self.backoff = b.clone();
            Ok(())
        }
    }

    /// The server's report endpoint as its ingest treats keys (a key it
    /// holds is a duplicate: nothing stored, its count ignored), and what
    /// each attempt carried; it loses the replies of the attempts named.
    #[derive(Default)]
    struct Server {
        held: std::cell::RefCell<Vec<String>>,
        dropped: std::cell::Cell<u64>,
        /// (key, dropped count) of every attempt.
        attempts: std::cell::RefCell<Vec<(String, u64)>>,
        lose: Vec<usize>,
    }

    impl Transport for Server {
        fn post_report(
            &self,
            key: &str,
            _body: &[u8],
            _depth: u64,
            dropped: u64,
            _store: Option<u128>,
        ) -> Result<Reply, SendError> {
            self.attempts.borrow_mut().push((key.to_owned(), dropped));
            let fresh = !self.held.borrow().iter().any(|k| k == key);
            if fresh {
                self.held.borrow_mut().push(key.to_owned());
                self.dropped.set(self.dropped.get() + dropped);
            }
            if self.lose.contains(&self.attempts.borrow().len()) {
                return Err(SendError::Transient {
                    message: "the reply was lost".to_owned(),
                    retry_after: None,
                });
            }
            Ok(Reply {
                format_version: 1,
                accepted: true,
                duplicate: !fresh,
                sampling: None,
                instructions: Vec::new(),
                takes: Vec::new(),
            })
        }
    }

    fn now() -> Budget {
        Budget {
            until: Instant::now() + Duration::from_secs(60),
            respect_backoff: false,
        }
    }

    /// A report whose reply was lost is sent again with the count its
    /// first attempt carried, whatever was dropped since: the server took
    /// that count when it stored the report and ignores the duplicate's,
    /// so the reports dropped since travel with the next report, once.
    #[test]
    fn a_repeat_carries_the_count_of_the_first_attempt() {
        let mut queue = Memory::with(&["a", "b"], 4);
        let server = Server {
            lose: vec![1],
            ..Server::default()
        };
        let first = deliver(&mut queue, &server, now(), || 0).unwrap();
        assert_eq!(first.error.as_deref(), Some("the reply was lost"));
        assert_eq!(queue.backoff.failures, 1);
        // Three more dropped (a full outbox) before the next delivery.
        queue.dropped += 3;
        let again = deliver(&mut queue, &server, now(), || 0).unwrap();
        assert_eq!((again.duplicates, again.delivered), (1, 1), "{again:?}");
        assert_eq!(
            *server.attempts.borrow(),
            [
                ("a".to_owned(), 4),
                ("a".to_owned(), 4),
                ("b".to_owned(), 3)
            ]
        );
        assert_eq!(server.dropped.get(), 7, "each dropped report once");
        assert_eq!((queue.rows.len(), queue.dropped), (0, 0));
    }

    /// A report dropped by a pass between being read as the head and its
    /// first attempt is not sent: the next one is.
    #[test]
    fn a_head_dropped_before_it_is_sent_is_skipped() {
        struct Dropping(Memory);
        impl Queue for Dropping {
            type Error = std::io::Error;
            fn oldest(&mut self) -> Result<Option<Queued>, Self::Error> {
                let head = self.0.oldest()?;
                // A pass drops it right after it was read.
                if let Some(h) = &head
                    && h.key == "a"
                {
                    self.0.remove(h.id);
                    self.0.dropped += 1;
                }
                Ok(head)
            }
            fn depth(&mut self) -> Result<u64, Self::Error> {
                self.0.depth()
            }
            fn dropped(&mut self) -> Result<u64, Self::Error> {
                self.0.dropped()
            }
            fn announce(&mut self, id: i64) -> Result<Option<u64>, Self::Error> {
                self.0.announce(id)
            }
            fn delivered(&mut self, id: i64, reply: &Reply) -> Result<(), Self::Error> {
                self.0.delivered(id, reply)
            }
            fn refused(&mut self, id: i64, why: &str) -> Result<(), Self::Error> {
                self.0.refused(id, why)
            }
            fn backoff(&mut self) -> Result<Backoff, Self::Error> {
                self.0.backoff()
            }
            fn set_backoff(&mut self, b: &Backoff) -> Result<(), Self::Error> {
                self.0.set_backoff(b)
            }
        }
        let mut queue = Dropping(Memory::with(&["a", "b"], 0));
        let server = Server::default();
        let done = deliver(&mut queue, &server, now(), || 0).unwrap();
        assert_eq!((done.delivered, done.remaining), (1, 0), "{done:?}");
        assert_eq!(*server.attempts.borrow(), [("b".to_owned(), 1)]);
    }

    /// A server of an older build refuses (400) a report holding a field
    /// it does not know. A host that queued the pass's warnings after a
    /// newer server's reply, and then reaches an older one (both behind
    /// one address during an upgrade), sends the report again without
    /// them, under the same key, rather than setting it aside for good; a
    /// report refused for anything else is set aside as before.
    #[test]
    fn a_report_an_older_server_refuses_for_its_warnings_goes_without_them() {
        struct Older {
            bodies: std::cell::RefCell<Vec<(String, String)>>,
        }
        impl Transport for Older {
            fn post_report(
                &self,
                key: &str,
                body: &[u8],
                _depth: u64,
                _dropped: u64,
                _store: Option<u128>,
            ) -> Result<Reply, SendError> {
                let text = String::from_utf8_lossy(body).into_owned();
                self.bodies
                    .borrow_mut()
                    .push((key.to_owned(), text.clone()));
                let value: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| SendError::Refused {
                        status: 400,
                        message: e.to_string(),
                    })?;
                for field in ["warnings", "verified_except"] {
                    if value.get(field).is_some() {
                        return Err(SendError::Refused {
                            status: 400,
                            message: format!("unknown field `{field}`"),
                        });
                    }
                }
                Ok(serde_json::from_str(
                    r#"{"format_version": 1, "accepted": true, "duplicate": false, "sampling": null}"#,
                )
                .unwrap())
            }
        }
        let mut queue = Memory::with(&["a", "v", "b", "c"], 0);
        queue.rows[0].0.body = br#"{"seq": 1, "warnings": ["User[w1]: said"]}"#.to_vec();
        // What an apply verified goes the same way.
        queue.rows[1].0.body =
            br#"{"seq": 2, "verified_except": ["File[x]"], "warnings": ["w"]}"#.to_vec();
        queue.rows[2].0.body = br#"{"seq": 3}"#.to_vec();
        queue.rows[3].0.body = b"not json".to_vec();
        let server = Older {
            bodies: Default::default(),
        };
        let done = deliver(&mut queue, &server, now(), || 0).unwrap();
        assert_eq!((done.delivered, done.remaining), (3, 0), "{done:?}");
        assert_eq!(done.refused.len(), 1, "{done:?}");
        let bodies = server.bodies.borrow();
        let sent: Vec<(&str, &str)> = bodies
            .iter()
            .map(|(k, b)| (k.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            sent,
            [
                ("a", r#"{"seq": 1, "warnings": ["User[w1]: said"]}"#),
                ("a", r#"{"seq":1}"#),
                (
                    "v",
                    r#"{"seq": 2, "verified_except": ["File[x]"], "warnings": ["w"]}"#
                ),
                ("v", r#"{"seq":2}"#),
                ("b", r#"{"seq": 3}"#),
                ("c", "not json"),
            ]
        );
    }
}
