//! When each traced vCPU thread waited for a host CPU: from the moment it was runnable and not
//! running (switched out still runnable, `prev_state=R`: preempted; or woken by `sched_wakeup`
//! after a sleep) to the moment it was switched in. The same run-queue wait the thread's
//! `/proc/<tid>/schedstat` counts, but with its times, so it can be summed over any part of
//! the run (`telemetry::run_window`) instead of only between two reads of the counters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Switch, Wakeup};

/// Every wait of the traced vCPU threads in one run's trace, µs from the run's start (as the
/// timeline's segments).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VcpuWaits {
    /// `[guest, vcpu, cpu, start µs, end µs]`, in the order they ended; `cpu` is the host CPU
    /// the thread ran on next (for a wait still going on when the trace stopped, the one it
    /// was preempted on or woken for).
    pub waits: Vec<[i64; 5]>,
    /// Whether the trace recorded wakeups: without them only preempted waits are known (a
    /// woken thread's wait for its CPU is then missing).
    pub wakeups_traced: bool,
    /// Runs of a vCPU thread after a sleep whose wakeup the trace did not hold (made on a CPU
    /// outside the traced ones): the wait between that wakeup and the run is missing.
    pub wakeups_unseen: u64,
    /// `[guest, vcpu, µs]`: from when each vCPU thread's state is known (the trace's start for
    /// one running then; else its first event). Before it, a wait is not seen.
    pub known_from_us: Vec<[i64; 3]>,
    /// Until when the waits are known, µs: where the trace stopped, or where its kept events
    /// end when the kernel dropped later ones.
    pub known_to_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// No event of the thread yet.
    Unknown,
    Running,
    /// Runnable, not running, since `ns`; `cpu`: where it was preempted or woken for.
    Waiting {
        since: u64,
        cpu: usize,
    },
    /// Went to sleep; not woken yet as far as the trace says.
    Sleeping,
}

/// The waits of `guests[g][v]` (host thread ids) from a trace's switches and wakeups (both in
/// time order, as the trace lists them; `wakeups` is None where they were not traced).
/// `traced`: when recording started and where what is known ends (ns, the trace's clock);
/// `run_start`: the run's start on that clock (µs are counted from it).
pub fn vcpu_waits(
    switches: &[Switch],
    wakeups: Option<&[Wakeup]>,
    guests: &[Vec<i32>],
    traced: (u64, u64),
    run_start: u64,
) -> VcpuWaits {
    let vcpu_of = super::timeline::vcpu_index(guests);
    let us = |ns: u64| (ns as i64 - run_start as i64).div_euclid(1000);
    let mut state: BTreeMap<i32, State> = vcpu_of.keys().map(|&t| (t, State::Unknown)).collect();
    let mut known_from: BTreeMap<i32, u64> = BTreeMap::new();
    let mut out = VcpuWaits {
        wakeups_traced: wakeups.is_some(),
        known_to_us: us(traced.1),
        ..Default::default()
    };
    let wakeups = wakeups.unwrap_or(&[]);
    let (mut i, mut j) = (0, 0);
    loop {
        // Merged by time; a wakeup before a switch at the same instant (it must precede it).
        let take_wakeup = match (switches.get(i), wakeups.get(j)) {
            (None, None) => break,
            (Some(s), Some(w)) => w.ns <= s.ns,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        };
        if take_wakeup {
            let w = &wakeups[j];
            j += 1;
            if w.ns > traced.1 {
                continue;
            }
            if let Some(st) = state.get_mut(&w.pid)
                && matches!(st, State::Sleeping | State::Unknown)
            {
                known_from.entry(w.pid).or_insert(w.ns);
                *st = State::Waiting {
                    since: w.ns,
                    cpu: w.target_cpu,
                };
            }
            continue;
        }
        let s = &switches[i];
        i += 1;
        if s.ns > traced.1 {
            continue;
        }
        if let Some(st) = state.get_mut(&s.prev_pid) {
            // Switched out: it ran until now (since the trace began, if this is its first event).
            known_from.entry(s.prev_pid).or_insert(traced.0);
            *st = if s.prev_state.starts_with('R') {
                State::Waiting {
                    since: s.ns,
                    cpu: s.cpu,
                }
            } else {
                State::Sleeping
            };
        }
        if let Some(st) = state.get_mut(&s.next_pid) {
            known_from.entry(s.next_pid).or_insert(s.ns);
            match *st {
                State::Waiting { since, .. } => {
                    let (g, v) = vcpu_of[&s.next_pid];
                    out.waits
                        .push([g as i64, v as i64, s.cpu as i64, us(since), us(s.ns)]);
                }
                State::Sleeping if out.wakeups_traced => out.wakeups_unseen += 1,
                _ => {}
            }
            *st = State::Running;
        }
    }
    for (tid, st) in &state {
        if let State::Waiting { since, cpu } = *st {
            let (g, v) = vcpu_of[tid];
            out.waits
                .push([g as i64, v as i64, cpu as i64, us(since), us(traced.1)]);
        }
    }
    out.known_from_us = known_from
        .iter()
        .map(|(tid, &ns)| {
            let (g, v) = vcpu_of[tid];
            [g as i64, v as i64, us(ns)]
        })
        .collect();
    out
}

impl VcpuWaits {
    /// From when guest `guest`'s vCPU `vcpu` is known to have waited or not, µs; None: the
    /// trace holds no event of it (the timeline says whether it ran all along).
    pub fn known_from(&self, guest: u32, vcpu: u32) -> Option<i64> {
        self.known_from_us
            .iter()
            .find(|k| k[0] == guest as i64 && k[1] == vcpu as i64)
            .map(|k| k[2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(cpu: usize, us: u64, prev: i32, state: &str, next: i32) -> Switch {
        Switch {
            cpu,
            ns: us * 1000,
            prev_pid: prev,
            prev_comm: format!("t{prev}"),
            prev_state: state.into(),
            next_pid: next,
            next_comm: format!("t{next}"),
        }
    }

    /// How long guest `g`'s vCPU 0 waited within `[from, to]` µs.
    fn wait_us(w: &VcpuWaits, g: i64, from: i64, to: i64) -> i64 {
        w.waits
            .iter()
            .filter(|x| x[0] == g && x[1] == 0)
            .map(|x| (x[4].min(to) - x[3].max(from)).max(0))
            .sum()
    }

    fn wakeup(us: u64, pid: i32, target_cpu: usize) -> Wakeup {
        Wakeup {
            cpu: 1,
            ns: us * 1000,
            pid,
            target_cpu,
        }
    }

    /// Two vCPU threads (10 and 20) share CPU 0; 20 also sleeps once; a host thread (99) and
    /// idle (0) come in between.
    #[test]
    fn preempted_and_woken_threads_wait_until_they_run_and_sleeping_ones_do_not() {
        let switches = [
            // 10 runs from the start; preempted at 100 by 20.
            switch(0, 100, 10, "R", 20),
            // 20 preempted at 300 by a host thread (10 still waiting).
            switch(0, 300, 20, "R+", 99),
            // The host thread sleeps at 350; 10 runs: it waited 100..350.
            switch(0, 350, 99, "S", 10),
            // 10 sleeps at 500; 20 runs: it waited 300..500.
            switch(0, 500, 10, "S", 20),
            // 20 sleeps at 600: idle.
            switch(0, 600, 20, "S", 0),
            // 10 was woken at 700 (below); runs at 720: waited 700..720.
            switch(0, 720, 0, "R", 10),
            // 10 preempted at 900 by 20, which was never woken in the trace (woken elsewhere).
            switch(0, 900, 10, "R", 20),
        ];
        let wakeups = [wakeup(650, 99, 0), wakeup(700, 10, 0), wakeup(710, 10, 0)];
        let guests = vec![vec![10], vec![20]];
        let w = vcpu_waits(&switches, Some(&wakeups), &guests, (0, 1_000_000), 0);
        assert_eq!(
            w.waits,
            [
                [0, 0, 0, 100, 350],
                [1, 0, 0, 300, 500],
                [0, 0, 0, 700, 720],
                // Still waiting when the trace stopped at 1000 µs.
                [0, 0, 0, 900, 1000],
            ]
        );
        assert_eq!(w.wakeups_unseen, 1, "20's run at 900 after its sleep at 600");
        // 10 ran from the trace's start; 20 is known from its first switch-in.
        assert_eq!(w.known_from(0, 0), Some(0));
        assert_eq!(w.known_from(1, 0), Some(100));
        assert_eq!(w.known_from(2, 0), None);
        assert_eq!(w.known_to_us, 1000);
        // Over parts of the run.
        assert_eq!(wait_us(&w, 0, 0, 1000), 250 + 20 + 100);
        assert_eq!(wait_us(&w, 0, 200, 710), 150 + 10);
        assert_eq!(wait_us(&w, 1, 0, 1000), 200);
        assert_eq!(wait_us(&w, 1, 500, 1000), 0);
        // Without wakeups only the preempted waits are there, and nothing is unseen.
        let w = vcpu_waits(&switches, None, &guests, (0, 1_000_000), 0);
        assert_eq!(w.waits.len(), 3);
        assert_eq!((w.wakeups_traced, w.wakeups_unseen), (false, 0));
        // Events past where the trace is known are not used; times count from the run's start.
        let w = vcpu_waits(&switches, Some(&wakeups), &guests, (0, 400_000), 50_000);
        assert_eq!(w.waits, [[0, 0, 0, 50, 300], [1, 0, 0, 250, 350]]);
        assert_eq!(w.known_to_us, 350);
    }

    #[test]
    fn parsed_wakeups_feed_it() {
        let text = "\
 CPU 0/TCG-10 [000] d..2.  1.000100: sched_switch: prev_comm=CPU 0/TCG prev_pid=10 prev_prio=120 prev_state=R ==> next_comm=qemu-system-x86 next_pid=99 next_prio=120
 qemu-system-x86-99 [000] d..2.  1.000300: sched_wakeup: comm=qemu-system-x86 pid=98 prio=120 target_cpu=001
 qemu-system-x86-99 [000] d..2.  1.000400: sched_switch: prev_comm=qemu-system-x86 prev_pid=99 prev_prio=120 prev_state=S ==> next_comm=CPU 0/TCG next_pid=10 next_prio=120
";
        let (switches, wakeups) = super::super::parse_with_wakeups(text);
        assert_eq!(switches.len(), 2);
        assert_eq!(
            wakeups,
            [Wakeup {
                cpu: 0,
                ns: 1_000_300_000,
                pid: 98,
                target_cpu: 1
            }]
        );
        let w = vcpu_waits(
            &switches,
            Some(&wakeups),
            &[vec![10]],
            (1_000_000_000, 1_001_000_000),
            1_000_000_000,
        );
        assert_eq!(w.waits, [[0, 0, 0, 100, 400]]);
    }
}
