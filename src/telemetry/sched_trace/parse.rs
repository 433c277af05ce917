//! `sched:sched_switch` lines of a trace, parsed: which thread left and which took each CPU, when;
//! and `sched:sched_wakeup` lines: which thread was made runnable, when.

/// One `sched_switch` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub cpu: usize,
    pub ns: u64,
    pub prev_pid: i32,
    pub prev_comm: String,
    /// `R` (preempted, still runnable), `S` (slept), `D`, ... with `+` for preempted in the kernel.
    pub prev_state: String,
    pub next_pid: i32,
    pub next_comm: String,
}

pub(super) fn parse_line(line: &str) -> Option<Switch> {
    let (head, body) = line.split_once(": sched_switch: ")?;
    let (cpu, ns) = head_cpu_ns(head)?;
    let (prev, next) = body.split_once(" ==> ")?;
    let field = |s: &str, key: &str, until: &str| -> Option<String> {
        let at = s.rfind(key)? + key.len();
        let rest = &s[at..];
        Some(match rest.find(until) {
            Some(end) if !until.is_empty() => rest[..end].to_string(),
            _ => rest.to_string(),
        })
    };
    Some(Switch {
        cpu,
        ns,
        prev_pid: field(prev, " prev_pid=", " ")?.parse().ok()?,
        prev_comm: field(prev, "prev_comm=", " prev_pid=")?,
        prev_state: field(prev, " prev_state=", "")?.trim().to_string(),
        next_pid: field(next, " next_pid=", " ")?.parse().ok()?,
        next_comm: field(next, "next_comm=", " next_pid=")?,
    })
}

/// One `sched_wakeup` line: thread `pid` put on a run queue (from here until it is switched in,
/// it waits for a CPU). Recorded on the CPU that did the wakeup (`cpu`), which may be another
/// than the one it will run on (`target_cpu`).
#[derive(Debug, Clone, PartialEq)]
pub struct Wakeup {
    pub cpu: usize,
    pub ns: u64,
    pub pid: i32,
    pub target_cpu: usize,
}

/// Parses the text `trace` of a tracefs instance in one pass: its `sched_switch` lines and its
/// `sched_wakeup` lines, each in order. Other lines (comments, other events) are skipped.
/// Command names may hold spaces (`CPU 0/TCG`).
pub fn parse_with_wakeups(text: &str) -> (Vec<Switch>, Vec<Wakeup>) {
    let (mut switches, mut wakeups) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(s) = parse_line(line) {
            switches.push(s);
        } else if let Some(w) = parse_wakeup_line(line) {
            wakeups.push(w);
        }
    }
    (switches, wakeups)
}

/// A `sched_wakeup` line: `... [CPU] ... TIMESTAMP: sched_wakeup: comm=C pid=P prio=N
/// target_cpu=T` (the command name may hold spaces, so the numbers are found from the right).
pub(super) fn parse_wakeup_line(line: &str) -> Option<Wakeup> {
    let (head, body) = line.split_once(": sched_wakeup: ")?;
    let (cpu, ns) = head_cpu_ns(head)?;
    let number = |key: &str| -> Option<i64> {
        let at = body.rfind(key)? + key.len();
        body[at..].split_whitespace().next()?.parse().ok()
    };
    Some(Wakeup {
        cpu,
        ns,
        pid: i32::try_from(number(" pid=")?).ok()?,
        target_cpu: usize::try_from(number(" target_cpu=")?).ok()?,
    })
}

/// An event line's head, "<task>-<pid> [CPU] flags TIMESTAMP" (flags absent without
/// irq-info): (CPU, timestamp in ns).
pub(super) fn head_cpu_ns(head: &str) -> Option<(usize, u64)> {
    let mut words = head.split_whitespace().rev();
    let ts = words.next()?;
    let cpu = words.find_map(|w| w.strip_prefix('[')?.strip_suffix(']')?.parse::<usize>().ok())?;
    let (secs, frac) = ts.split_once('.')?;
    let frac_ns = format!("{frac:0<9}");
    let ns = secs.parse::<u64>().ok()? * 1_000_000_000 + frac_ns.get(..9)?.parse::<u64>().ok()?;
    Some((cpu, ns))
}
