//! Tasks that wake themselves while they run. A hyper connection is one task with two halves
//! that hand work to each other (the request head to the service, the body to the reader of
//! the body, the reply to the writer), and each hand-over wakes the task while it is being
//! polled. The runtime then puts the task at the back of its queue and, to keep the queue
//! moving, wakes a sleeping worker thread, which may take the task over on a cold CPU. Most of
//! the time the task would simply have been polled again next.
//!
//! [`Inline`] polls such a future again at once, in the same poll, a few times at most; a
//! wake-up that comes from elsewhere, or while it is not being polled, goes to the task's own
//! waker as before. The gateway runs its client connections this way. Other tasks stay plain:
//! the work of each request hands what it produces to another task (the reply to the client's
//! connection), and the task it wakes should run next, not after it has polled itself again.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Not being polled: a wake-up goes to the task's waker.
const IDLE: u8 = 0;
/// Being polled: a wake-up is noted, and the poll goes round again.
const POLLING: u8 = 1;
/// Woken while being polled.
const WOKEN: u8 = 2;

/// How many times one poll may go round again; beyond, the task yields to the runtime as it
/// would have anyway (a future that keeps waking itself is yielding on purpose).
const AGAIN: u32 = 4;

/// The waker the inner future sees.
#[derive(Debug)]
struct Signal {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // The poll in progress sees it when it ends.
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A future polled again at once when it wakes itself (see the module documentation).
    pub struct Inline<F> {
        #[pin]
        inner: F,
        signal: Arc<Signal>,
        waker: Waker,
    }
}

impl<F> std::fmt::Debug for Inline<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inline")
            .field("signal", &self.signal)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Inline<F> {
    pub fn new(inner: F) -> Inline<F> {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Inline {
            inner,
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future> Future for Inline<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        this.signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(this.waker);
        let mut again = 0;
        loop {
            this.signal.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.inner.as_mut().poll(&mut inner_cx) {
                this.signal.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            if this
                .signal
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
            // Woken during the poll. Once the runtime's budget for this task is spent, its
            // resources stay pending until the task yields: then yield.
            if again == AGAIN || !tokio::task::coop::has_budget_remaining() {
                this.signal.state.store(IDLE, Ordering::Release);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            again += 1;
        }
    }
}

/// Lets the tasks already woken on this thread run before the current one goes on: the task
/// wakes itself, once, and so goes to the back of the runtime's queue. A call's work yields so
/// after handing its reply over, and the client's connection writes the reply before the call's
/// own end (its session given back, its state dropped) is run. (`tokio::task::yield_now` would
/// defer the wake-up until the runtime has polled its driver: a system call more when nothing
/// else is due.)
pub async fn behind_woken() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wake-ups the task itself gets.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes itself `times` times while polled, then is ready; counts its polls.
    struct SelfWaking {
        times: usize,
        polls: usize,
    }

    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.times == 0 {
                return Poll::Ready(self.polls);
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn poll_once<F: Future + Unpin>(f: &mut F, count: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(count.clone());
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    #[tokio::test]
    async fn a_future_that_wakes_itself_is_polled_again_in_the_same_poll() {
        let count = Arc::new(Count::default());
        let mut f = Inline::new(SelfWaking { times: 3, polls: 0 });
        assert_eq!(poll_once(&mut f, &count), Poll::Ready(4));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the task was never rescheduled"
        );
    }

    #[tokio::test]
    async fn one_that_keeps_waking_itself_yields_after_a_few_rounds() {
        let count = Arc::new(Count::default());
        let mut f = Inline::new(SelfWaking {
            times: 100,
            polls: 0,
        });
        assert!(poll_once(&mut f, &count).is_pending());
        assert_eq!(f.inner.polls, AGAIN as usize + 1);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "yielded: woke its task once"
        );
        // And it gets on with it when polled again.
        let mut polls = 1;
        while poll_once(&mut f, &count).is_pending() {
            polls += 1;
        }
        assert_eq!(polls + 1, 101_usize.div_ceil(AGAIN as usize + 1));
    }

    #[tokio::test]
    async fn a_wake_up_from_elsewhere_reaches_the_task() {
        let count = Arc::new(Count::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut f = Inline::new(rx);
        assert!(poll_once(&mut f, &count).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        tx.send(7).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll_once(&mut f, &count), Poll::Ready(Ok(7)));
    }

    /// Wake-ups from another thread racing with the end of each poll are never lost: every
    /// message gets through and the task ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_wake_up_is_lost_to_a_race_with_the_poll() {
        const N: u64 = 20_000;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1);
        let consumer = tokio::spawn(Inline::new(async move {
            let mut sum = 0;
            while let Some(n) = rx.recv().await {
                sum += n;
            }
            sum
        }));
        let producer = std::thread::spawn(move || {
            for n in 1..=N {
                tx.blocking_send(n).unwrap();
            }
        });
        let sum = tokio::time::timeout(std::time::Duration::from_secs(60), consumer)
            .await
            .expect("no wake-up lost")
            .unwrap();
        producer.join().unwrap();
        assert_eq!(sum, N * (N + 1) / 2);
    }

    /// On a shard's runtime, the task a reply is handed to runs before the sender goes on.
    #[test]
    fn the_task_handed_a_reply_runs_before_the_sender_goes_on() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        rt.block_on(async {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let seen = order.clone();
            let receiver = tokio::spawn(async move {
                rx.await.unwrap();
                seen.lock().unwrap().push("reply written");
            });
            let seen = order.clone();
            let sender = tokio::spawn(async move {
                // The receiver has polled once and waits.
                tokio::task::yield_now().await;
                tx.send(()).unwrap();
                behind_woken().await;
                seen.lock().unwrap().push("sender went on");
            });
            receiver.await.unwrap();
            sender.await.unwrap();
        });
        assert_eq!(*order.lock().unwrap(), ["reply written", "sender went on"]);
    }
}
