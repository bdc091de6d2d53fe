//! Threads that stay awake through a generation, for the decode step's
//! parallel regions.
//!
//! A generated token runs about four parallel regions per layer (a hundred
//! or more per token), each a few hundred microseconds, with short serial
//! work between them (norms, attention, SwiGLU). Between regions rayon's
//! idle workers yield a few dozen times and then sleep, so most regions
//! began by waking a sleeping thread through the kernel: some 400 context
//! switches per token, measured. While a [`with_team`] closure runs, its
//! thread's regions go instead to helper threads that stay awake between
//! them, yielding their core (they sleep only after [`AWAKE_FOR`] without
//! work), so a region starts on all threads at once.
//!
//! The team has as many threads as the current rayon pool (the `threads`
//! setting): the caller and `current_num_threads() - 1` helpers. Only the
//! caller's own regions use it; elsewhere [`for_each`] is rayon's.

use rayon::prelude::*;
use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a helper waits for the next region, yielding its core, before
/// it sleeps: longer than the serial work between two regions and between
/// two tokens.
const AWAKE_FOR: Duration = Duration::from_micros(500);

thread_local! {
    /// The team of the [`with_team`] closure running on this thread.
    static CURRENT: Cell<*const Shared> = const { Cell::new(ptr::null()) };
}

/// Runs `f` with a team for this thread's parallel regions (see the module
/// documentation); the helpers end when `f` returns or panics.
pub(crate) fn with_team<R>(f: impl FnOnce() -> R) -> R {
    let helpers = rayon::current_num_threads().saturating_sub(1);
    if helpers == 0 || !CURRENT.get().is_null() {
        return f();
    }
    let shared = Shared {
        threads: helpers + 1,
        ..Shared::default()
    };
    std::thread::scope(|s| {
        let mut spawned = 0;
        for i in 0..helpers {
            let name = format!("attest-local-team-{i}");
            if std::thread::Builder::new()
                .name(name)
                .spawn_scoped(s, || shared.help())
                .is_ok()
            {
                spawned += 1;
            }
        }
        // Quit is signalled however `f` ends, or the scope would wait for
        // the helpers forever.
        let _quit = Quit(&shared);
        if spawned == 0 {
            return f();
        }
        CURRENT.set(&shared);
        let _current = ClearCurrent;
        f()
    })
}

/// `f` on every item, in parallel: on this thread's team inside
/// [`with_team`], on the rayon pool elsewhere. A panic in `f` is raised
/// again on the calling thread, as rayon does.
pub(crate) fn for_each<T: Send>(items: Vec<T>, f: impl Fn(T) + Sync) {
    let team = CURRENT.get();
    let count = u32::try_from(items.len()).ok().filter(|_| !team.is_null());
    let Some(count) = count else {
        items.into_par_iter().for_each(&f);
        return;
    };
    // SAFETY: `CURRENT` is set only while `with_team`'s closure runs on
    // this thread, and `shared` outlives that closure.
    let team = unsafe { &*team };
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let task = |i: usize| {
        let item = slots[i].lock().ok().and_then(|mut slot| slot.take());
        if let Some(item) = item {
            f(item);
        }
    };
    if let Some(panic) = team.run(count, &task) {
        resume_unwind(panic);
    }
}

/// One parallel region: `count` calls of `task`. The caller claims tasks
/// from the front, the helpers from the back, in runs that shrink as the
/// region empties: each thread reads its rows in order, there are few
/// claims to contend on, and a helper the machine has descheduled holds
/// only a small run that the caller then waits for.
struct Region<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    count: usize,
    /// The unclaimed tasks `front..back`, as `back << 32 | front`.
    ends: AtomicU64,
    /// Tasks the helpers have finished.
    helped: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Region<'_> {
    fn new(task: &(dyn Fn(usize) + Sync), count: u32) -> Region<'_> {
        Region {
            task,
            count: count as usize,
            ends: AtomicU64::new(u64::from(count) << 32),
            helped: AtomicUsize::new(0),
            panic: Mutex::new(None),
        }
    }

    /// Claims a run of tasks from the front or the back: an eighth of the
    /// rest per thread, at least one.
    fn claim(&self, front: bool, threads: usize) -> Option<std::ops::Range<usize>> {
        let mut ends = self.ends.load(Relaxed);
        loop {
            let (lo, hi) = (ends & u64::from(u32::MAX), ends >> 32);
            if lo >= hi {
                return None;
            }
            let take = ((hi - lo) / (8 * threads as u64)).max(1);
            let (claimed, rest) = if front {
                (lo..lo + take, hi << 32 | (lo + take))
            } else {
                (hi - take..hi, (hi - take) << 32 | lo)
            };
            match self
                .ends
                .compare_exchange_weak(ends, rest, Relaxed, Relaxed)
            {
                Ok(_) => return Some(claimed.start as usize..claimed.end as usize),
                Err(now) => ends = now,
            }
        }
    }

    /// Runs claimed tasks until none are left; how many it ran.
    fn work(&self, front: bool, threads: usize) -> usize {
        let mut ran = 0;
        while let Some(run) = self.claim(front, threads) {
            ran += run.len();
            for i in run {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (self.task)(i))) {
                    if let Ok(mut slot) = self.panic.lock() {
                        slot.get_or_insert(panic);
                    }
                }
            }
            if !front {
                self.helped.fetch_add(ran, Release);
                ran = 0;
            }
        }
        ran
    }
}

#[derive(Default)]
struct Shared {
    /// The region being run, or null. Points into the caller's stack frame:
    /// the caller clears it and waits for `inside` to reach zero before the
    /// region goes out of scope.
    region: AtomicPtr<Region<'static>>,
    /// Helpers that may be looking at `region`.
    inside: AtomicUsize,
    /// Bumped when a region is published.
    epoch: AtomicUsize,
    quit: AtomicBool,
    /// The caller and its helpers.
    threads: usize,
    /// Helpers asleep, and what wakes them.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Runs `task(0..count)` on the caller and the helpers; the first
    /// panic of a task, if any.
    fn run(&self, count: u32, task: &(dyn Fn(usize) + Sync)) -> Option<Box<dyn Any + Send>> {
        let region = Region::new(task, count);
        // The lifetime is erased for the helpers; see `region` above.
        let published = ptr::from_ref(&region).cast::<Region<'static>>().cast_mut();
        self.region.store(published, SeqCst);
        self.epoch.fetch_add(1, SeqCst);
        if self.sleeping.load(SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.wake.notify_all();
        }
        let own = region.work(true, self.threads);
        wait_until(|| region.helped.load(Acquire) >= region.count - own);
        self.region.store(ptr::null_mut(), SeqCst);
        wait_until(|| self.inside.load(SeqCst) == 0);
        region.panic.into_inner().ok().flatten()
    }

    /// A helper's loop: wait for a region (spinning, then asleep), help
    /// with it, until quit.
    fn help(&self) {
        // From the start: a helper that starts late joins the region
        // already published.
        let mut seen = 0;
        loop {
            let waiting = Instant::now();
            let mut spins = 0u32;
            loop {
                if self.quit.load(Acquire) {
                    return;
                }
                let epoch = self.epoch.load(SeqCst);
                if epoch != seen {
                    seen = epoch;
                    break;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(16) && waiting.elapsed() > AWAKE_FOR {
                    self.sleep(seen);
                } else {
                    // Yielded, not spun: on a busy machine the core goes to
                    // whoever else is runnable (the caller, a build) instead
                    // of to this wait.
                    std::thread::yield_now();
                }
            }
            // Counted before the region is read, so the caller, which
            // clears `region` before it waits for `inside`, either waits
            // for this helper or is seen to have cleared it.
            self.inside.fetch_add(1, SeqCst);
            let region = self.region.load(SeqCst);
            if !region.is_null() {
                // SAFETY: non-null while its caller waits (see `region`).
                unsafe { &*region }.work(false, self.threads);
            }
            self.inside.fetch_sub(1, SeqCst);
        }
    }

    /// Sleeps until the epoch moves past `seen` or quit.
    fn sleep(&self, seen: usize) {
        let Ok(mut guard) = self.lock.lock() else {
            return;
        };
        self.sleeping.fetch_add(1, SeqCst);
        // Checked after counting ourselves asleep: a publisher that bumped
        // the epoch before seeing us counted is seen here.
        while self.epoch.load(SeqCst) == seen && !self.quit.load(SeqCst) {
            guard = match self.wake.wait(guard) {
                Ok(g) => g,
                Err(_) => break,
            };
        }
        self.sleeping.fetch_sub(1, SeqCst);
    }
}

/// Spins until `done`, yielding the core after a while: a helper that holds
/// the last task may be waiting for it (a busy machine).
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins = spins.saturating_add(1);
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Tells the helpers to end (on drop).
struct Quit<'a>(&'a Shared);

impl Drop for Quit<'_> {
    fn drop(&mut self) {
        self.0.quit.store(true, SeqCst);
        let _guard = self.0.lock.lock();
        self.0.wake.notify_all();
    }
}

/// Clears this thread's team (on drop).
struct ClearCurrent;

impl Drop for ClearCurrent {
    fn drop(&mut self) {
        CURRENT.set(ptr::null());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_inside_and_outside_a_team() {
        let sum = |n: usize| {
            let total = AtomicUsize::new(0);
            for_each((1..=n).collect(), |i| {
                total.fetch_add(i, Relaxed);
            });
            total.into_inner()
        };
        assert_eq!(sum(100), 5050);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let sums = pool.install(|| with_team(|| (0..200).map(|_| sum(100)).collect::<Vec<_>>()));
        assert!(sums.iter().all(|&s| s == 5050), "{sums:?}");
    }

    #[test]
    fn items_borrowing_the_callers_data_are_written_in_place() {
        let mut out = vec![0u32; 1000];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            with_team(|| {
                let chunks: Vec<(usize, &mut [u32])> = out.chunks_mut(64).enumerate().collect();
                for_each(chunks, |(c, chunk)| {
                    for (j, v) in chunk.iter_mut().enumerate() {
                        *v = (c * 64 + j) as u32;
                    }
                });
            })
        });
        assert!(out.iter().enumerate().all(|(i, &v)| v == i as u32));
    }

    #[test]
    fn a_panicking_task_is_raised_on_the_caller_and_the_team_ends() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (result, cleared) = pool.install(|| {
            let result = catch_unwind(|| {
                with_team(|| {
                    for_each((0..50).collect(), |i: i32| {
                        assert!(i != 37, "task {i} fails");
                    })
                })
            });
            // The thread's team is gone: its regions go to rayon again.
            (result, CURRENT.get().is_null())
        });
        let panic = result.expect_err("the panic reaches the caller");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("task 37 fails"), "{message}");
        assert!(cleared);
    }

    #[test]
    fn helpers_that_fell_asleep_are_woken_for_the_next_region() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let threads_per_round = pool.install(|| {
            with_team(|| {
                (0..3)
                    .map(|_| {
                        // Long enough that the helper has gone to sleep.
                        std::thread::sleep(AWAKE_FOR * 4);
                        let ran_on = Mutex::new(std::collections::HashSet::new());
                        for_each((0..32).collect(), |_: usize| {
                            let name = std::thread::current().name().map(str::to_owned);
                            ran_on.lock().unwrap().insert(name);
                            // Tasks the caller cannot finish alone before
                            // a woken helper joins.
                            std::thread::sleep(Duration::from_millis(1));
                        });
                        let ran_on = ran_on.into_inner().unwrap();
                        // The team's helper, not the pool's other worker.
                        let helped = ran_on
                            .iter()
                            .flatten()
                            .any(|n| n.starts_with("attest-local-team-"));
                        (ran_on.len(), helped)
                    })
                    .collect::<Vec<_>>()
            })
        });
        assert_eq!(threads_per_round, [(2, true), (2, true), (2, true)]);
    }
}
