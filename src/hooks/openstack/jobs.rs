//! Cloud work that outlives a hook call. CAPI gives a hook 10 s by default, and
//! a Glance/Nova/Neutron round or an Octavia delete can take longer on a busy
//! cloud, so the work runs in the background, one job per key at a time, and each
//! call answers from the latest finished result or says that one is running.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::Notify;

/// What a job has found so far, shown while it runs.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<Option<String>>>);

impl Progress {
    pub fn set(&self, message: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.into());
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What a call sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View<R> {
    /// The job finished (`Err` holds a panic's message) recently enough.
    Done(Result<R, String>),
    /// A job is running; its progress message, if it set one.
    Running(Option<String>),
}

struct Finished<R> {
    result: Result<R, String>,
    at: Instant,
}

struct SlotState<R> {
    running: bool,
    /// Bumped when a job starts, so a waiter knows its job finished.
    run: u64,
    last: Option<Finished<R>>,
    progress: Progress,
}

struct Slot<R> {
    state: Mutex<SlotState<R>>,
    done: Notify,
}

/// Jobs by key.
pub struct Jobs<R> {
    slots: Mutex<HashMap<String, Arc<Slot<R>>>>,
}

impl<R> Default for Jobs<R> {
    fn default() -> Self {
        Jobs {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

/// Finished results older than this are dropped from memory.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

impl<R: Clone + Send + 'static> Jobs<R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The answer for `key`: its last result when younger than `fresh_for`;
    /// otherwise a new job from `start`, waited for up to `wait`. While a job
    /// started by an earlier call runs, the answer is immediate.
    pub async fn answer<F, Fut>(
        &self,
        key: &str,
        fresh_for: Duration,
        wait: Duration,
        start: F,
    ) -> View<R>
    where
        F: FnOnce(Progress) -> Fut,
        Fut: Future<Output = R> + Send + 'static,
    {
        let slot = self.slot(key);
        // Registered before looking at the state, so a finish in between is not missed.
        let notified = slot.done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (waiting_for, started_here) = {
            let mut st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            let started_here = !st.running;
            if started_here {
                if let Some(last) = &st.last {
                    if last.at.elapsed() < fresh_for {
                        return View::Done(last.result.clone());
                    }
                }
                st.running = true;
                st.run += 1;
                st.progress = Progress::default();
                let fut = start(st.progress.clone());
                let slot = slot.clone();
                tokio::spawn(async move {
                    let result = std::panic::AssertUnwindSafe(fut)
                        .catch_unwind()
                        .await
                        .map_err(|p| {
                            let why = p
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| p.downcast_ref::<String>().cloned())
                                .unwrap_or_default();
                            tracing::error!(%why, "a cloud check panicked");
                            format!("the check failed unexpectedly: {why}")
                        });
                    let mut st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.running = false;
                    st.last = Some(Finished {
                        result,
                        at: Instant::now(),
                    });
                    drop(st);
                    slot.done.notify_waiters();
                });
            }
            (st.run, started_here)
        };
        if started_here {
            let _ = tokio::time::timeout(wait, notified).await;
        }
        let st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        match &st.last {
            Some(last) if !st.running || st.run != waiting_for => View::Done(last.result.clone()),
            _ => View::Running(st.progress.get()),
        }
    }

    fn slot(&self, key: &str) -> Arc<Slot<R>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|_, s| {
            let st = s.state.lock().unwrap_or_else(|e| e.into_inner());
            st.running
                || st
                    .last
                    .as_ref()
                    .is_none_or(|l| l.at.elapsed() < FORGET_AFTER)
        });
        slots
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    state: Mutex::new(SlotState {
                        running: false,
                        run: 0,
                        last: None,
                        progress: Progress::default(),
                    }),
                    done: Notify::new(),
                })
            })
            .clone()
    }

    /// Keys with a job running now.
    pub fn running(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .values()
            .filter(|s| s.state.lock().unwrap_or_else(|e| e.into_inner()).running)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_quick_job_answers_the_call_that_started_it() {
        let jobs: Jobs<u32> = Jobs::new();
        let v = jobs
            .answer("k", LONG, Duration::from_secs(5), |_| async { 7 })
            .await;
        assert_eq!(v, View::Done(Ok(7)));
        // Fresh: answered without a new job.
        let v = jobs
            .answer("k", LONG, Duration::ZERO, |_| async {
                panic!("not started")
            })
            .await;
        assert_eq!(v, View::Done(Ok(7)));
    }

    #[tokio::test]
    async fn a_slow_job_is_running_until_it_is_done_and_runs_once() {
        let jobs: Arc<Jobs<u32>> = Arc::new(Jobs::new());
        let started = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let start = |started: Arc<AtomicUsize>, gate: Arc<Notify>| {
            move |p: Progress| {
                started.fetch_add(1, Ordering::SeqCst);
                async move {
                    p.set("halfway");
                    gate.notified().await;
                    3
                }
            }
        };
        let t = Instant::now();
        let v = jobs
            .answer(
                "k",
                LONG,
                Duration::from_millis(50),
                start(started.clone(), gate.clone()),
            )
            .await;
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(matches!(v, View::Running(_)), "{v:?}");
        // A later call does not wait for a job it did not start.
        let t = Instant::now();
        let v = jobs
            .answer(
                "k",
                LONG,
                Duration::from_secs(30),
                start(started.clone(), gate.clone()),
            )
            .await;
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(v, View::Running(Some("halfway".into())));
        assert_eq!(started.load(Ordering::SeqCst), 1, "one job per key");
        assert_eq!(jobs.running(), 1);
        gate.notify_one();
        let mut v = View::Running(None);
        for _ in 0..100 {
            v = jobs
                .answer(
                    "k",
                    LONG,
                    Duration::ZERO,
                    start(started.clone(), gate.clone()),
                )
                .await;
            if v != View::Running(Some("halfway".into())) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(v, View::Done(Ok(3)));
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert_eq!(jobs.running(), 0);
    }

    #[tokio::test]
    async fn stale_results_start_a_new_job_and_panics_become_errors() {
        let jobs: Jobs<u32> = Jobs::new();
        jobs.answer("k", LONG, Duration::from_secs(5), |_| async { 1 })
            .await;
        let v = jobs
            .answer("k", Duration::ZERO, Duration::from_secs(5), |_| async { 2 })
            .await;
        assert_eq!(v, View::Done(Ok(2)));
        let v = jobs
            .answer("other", LONG, Duration::from_secs(5), |_| async {
                if true {
                    panic!("boom");
                }
                0
            })
            .await;
        assert_eq!(
            v,
            View::Done(Err("the check failed unexpectedly: boom".into()))
        );
    }
}
