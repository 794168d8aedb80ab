//! What one slow or hostile client may hold on the hook listener: the bytes of request
//! bodies in flight (shared by all requests), the time a body may take to arrive, and
//! how long a connection may sit without a request.
//!
//! Connections themselves are capped in [`super::HookServer::serve`]; header-read
//! timeouts and the HTTP/2 stream limit are hyper's own settings.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::metrics::{ListenerMetrics, Refusal};

/// Limits on reading request bodies, shared by every connection.
#[derive(Clone, Debug)]
pub struct BodyLimits {
    pub max_body: usize,
    pub read_timeout: Duration,
    /// One permit per body byte held in memory by a request in flight.
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    pub metrics: ListenerMetrics,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive within {0:?}")]
    Timeout(Duration),
    #[error(
        "the server is busy: request bodies in flight would exceed {limit} bytes; retry later"
    )]
    Busy { limit: usize },
    #[error("reading the request body failed: {0}")]
    Read(String),
}

impl BodyError {
    /// The refusal counted for it, if it is one of the listener's limits.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            BodyError::TooLarge { .. } => Some(Refusal::body_too_large),
            BodyError::Timeout(_) => Some(Refusal::body_read_timeout),
            BodyError::Busy { .. } => Some(Refusal::in_flight_bytes),
            BodyError::Read(_) => None,
        }
    }
}

/// A request body and its share of the in-flight budget, given back when dropped
/// (after the answer is encoded).
#[derive(Debug)]
pub struct HeldBody {
    pub bytes: Vec<u8>,
    held: usize,
    _permit: Option<OwnedSemaphorePermit>,
    metrics: ListenerMetrics,
}

impl Drop for HeldBody {
    fn drop(&mut self) {
        self.metrics.in_flight_bytes.dec_by(self.held as i64);
    }
}

impl BodyLimits {
    pub fn new(
        max_body: usize,
        read_timeout: Duration,
        max_in_flight: usize,
        metrics: ListenerMetrics,
    ) -> BodyLimits {
        let max_in_flight = max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        BodyLimits {
            max_body,
            read_timeout,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            metrics,
        }
    }

    /// Takes `n` more bytes of the budget without waiting: a request that cannot have
    /// them now is refused rather than queued behind bodies that may never finish.
    fn reserve(&self, n: usize, held: &mut Option<OwnedSemaphorePermit>) -> Result<(), BodyError> {
        if n == 0 {
            return Ok(());
        }
        let busy = BodyError::Busy {
            limit: self.max_in_flight,
        };
        let n32 = u32::try_from(n).map_err(|_| busy.clone())?;
        let permit = self
            .in_flight
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| busy)?;
        self.metrics.in_flight_bytes.inc_by(n as i64);
        match held {
            Some(p) => p.merge(permit),
            None => *held = Some(permit),
        }
        Ok(())
    }

    /// Reads a whole body within the size, time and in-flight limits. A declared
    /// `Content-Length` over the limit is refused before a byte is read, and its bytes
    /// are reserved up front.
    pub async fn read(
        &self,
        mut body: Body,
        content_length: Option<u64>,
    ) -> Result<HeldBody, BodyError> {
        let too_large = BodyError::TooLarge {
            limit: self.max_body,
        };
        let declared = match content_length {
            Some(n) if n > self.max_body as u64 => return Err(too_large),
            Some(n) => n as usize,
            None => 0,
        };
        let mut permit = None;
        let mut reserved = 0usize;
        let result = async {
            self.reserve(declared, &mut permit)?;
            reserved = declared;
            let mut bytes = Vec::with_capacity(declared);
            let deadline = Instant::now() + self.read_timeout;
            loop {
                let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                    Err(_) => return Err(BodyError::Timeout(self.read_timeout)),
                    Ok(None) => break,
                    Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let len = bytes.len() + data.len();
                if len > self.max_body {
                    return Err(too_large.clone());
                }
                if len > reserved {
                    self.reserve(len - reserved, &mut permit)?;
                    reserved = len;
                }
                bytes.extend_from_slice(&data);
            }
            Ok(bytes)
        }
        .await;
        let mut held = HeldBody {
            bytes: Vec::new(),
            held: reserved,
            _permit: permit,
            metrics: self.metrics.clone(),
        };
        // On an error `held` is dropped here and gives its bytes back.
        held.bytes = result?;
        Ok(held)
    }
}

/// When a connection last had a request, and how many it has now, so the listener
/// can close connections that sit unused. HTTP/2 pings keep the transport busy but are
/// not use.
#[derive(Debug)]
pub struct ConnActivity {
    born: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `born` when the last request ended (or the connection opened).
    last_ms: AtomicU64,
}

impl ConnActivity {
    pub fn new() -> Arc<ConnActivity> {
        Arc::new(ConnActivity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        })
    }

    /// Marks a request in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        RequestGuard(self.clone())
    }

    /// When the connection counts as idle if nothing happens before; `None` while a
    /// request is in flight.
    pub fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        Some(self.born + last + idle)
    }
}

/// Ends a request's claim on its connection.
pub struct RequestGuard(Arc<ConnActivity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_ms.store(ms, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use futures::{stream, StreamExt};

    fn limits(max_body: usize, in_flight: usize) -> BodyLimits {
        BodyLimits::new(
            max_body,
            Duration::from_millis(200),
            in_flight,
            ListenerMetrics::default(),
        )
    }

    fn chunked(parts: &[&'static str]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::from_static(p.as_bytes())))
            .collect();
        Body::from_stream(stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_is_read_whole_and_its_bytes_are_given_back_when_dropped() {
        let l = limits(100, 100);
        let held = l.read(chunked(&["ab", "cd"]), None).await.expect("read");
        assert_eq!(held.bytes, b"abcd");
        assert_eq!(l.metrics.in_flight_bytes.get(), 4);
        assert_eq!(l.in_flight.available_permits(), 96);
        drop(held);
        assert_eq!(l.metrics.in_flight_bytes.get(), 0);
        assert_eq!(l.in_flight.available_permits(), 100);
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_unread() {
        let l = limits(10, 100);
        let err = l.read(chunked(&["x"]), Some(11)).await.unwrap_err();
        assert_eq!(err, BodyError::TooLarge { limit: 10 });
        let err = l
            .read(chunked(&["0123456", "789ab"]), None)
            .await
            .unwrap_err();
        assert_eq!(err, BodyError::TooLarge { limit: 10 });
        assert_eq!(l.in_flight.available_permits(), 100);
    }

    #[tokio::test]
    async fn bodies_over_the_shared_budget_are_refused_while_others_hold_it() {
        let l = limits(100, 10);
        let first = l.read(chunked(&["123456"]), Some(6)).await.expect("fits");
        let err = l.read(chunked(&["12345"]), Some(5)).await.unwrap_err();
        assert_eq!(err, BodyError::Busy { limit: 10 });
        // Undeclared lengths are counted as they arrive.
        let err = l.read(chunked(&["12", "345"]), None).await.unwrap_err();
        assert_eq!(err, BodyError::Busy { limit: 10 });
        assert_eq!(l.metrics.in_flight_bytes.get(), 6);
        drop(first);
        let again = l
            .read(chunked(&["12345"]), Some(5))
            .await
            .expect("room again");
        assert_eq!(again.bytes, b"12345");
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out_and_holds_nothing() {
        let l = limits(100, 100);
        let endless = Body::from_stream(
            stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{"))])
                .chain(stream::pending()),
        );
        let err = l.read(endless, Some(50)).await.unwrap_err();
        assert_eq!(err, BodyError::Timeout(Duration::from_millis(200)));
        assert_eq!(l.in_flight.available_permits(), 100);
        assert_eq!(l.metrics.in_flight_bytes.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_without_requests_in_flight() {
        let a = ConnActivity::new();
        let idle = Duration::from_secs(60);
        let opened = a.idle_at(idle).expect("no request yet");
        let g = a.begin();
        assert_eq!(a.idle_at(idle), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(g);
        let after = a.idle_at(idle).expect("request over");
        assert!(
            after >= opened + Duration::from_secs(5),
            "{after:?} vs {opened:?}"
        );
    }
}
