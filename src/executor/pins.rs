//! Whether the vCPU pins a bring-up asked for hold: each vCPU thread's affinity read back from
//! the kernel after pinning. A pin that failed or did not take fails the bring-up with the
//! reason, since every figure of the guest set would be at another level than the row says;
//! the journal records the sets read back, not the plan.

use serde_json::{Value, json};

/// One guest's pins: its index, the CPUs planned per vCPU (vCPU v takes set v mod their
/// count), and its vCPU threads.
pub struct GuestPins<'a> {
    pub guest: u32,
    pub planned: &'a [Vec<usize>],
    pub tids: &'a [i32],
}

/// Each vCPU thread's affinity as read (`read(tid)`) against its plan. Ok: the sets read back,
/// per guest `{"guest", "vcpu_to_cpus"}`; Err: every vCPU whose pin did not hold, in words.
pub fn verify(
    guests: &[GuestPins<'_>],
    read: impl Fn(i32) -> Result<Vec<usize>, String>,
) -> Result<Value, String> {
    let mut problems = Vec::new();
    let mut held = Vec::new();
    for GuestPins {
        guest: g,
        planned: sets,
        tids,
    } in guests
    {
        let mut map = Vec::new();
        for (v, tid) in tids.iter().enumerate() {
            let Some(want) = sets.get(v % sets.len().max(1)) else {
                problems.push(format!("guest {g} vCPU {v}: no CPUs planned"));
                continue;
            };
            match read(*tid) {
                Ok(mut got) => {
                    got.sort_unstable();
                    let mut want = want.clone();
                    want.sort_unstable();
                    if got != want {
                        problems.push(format!(
                            "guest {g} vCPU {v} (thread {tid}) runs on CPUs {got:?}, not the {want:?} it was pinned to"
                        ));
                    }
                    map.push((v as u32, got));
                }
                Err(e) => problems.push(format!("guest {g} vCPU {v} (thread {tid}): {e}")),
            }
        }
        held.push(journaled(*g, &map));
    }
    match problems.is_empty() {
        true => Ok(Value::Array(held)),
        false => Err(format!("vCPU pins did not hold: {}", problems.join("; "))),
    }
}

/// One guest's pins as the journal keeps them: `{"guest", "vcpu_to_cpus"}`, and where each
/// vCPU has one CPU also as plain (vCPU, CPU) pairs (`vcpu_to_cpu`), what a reader of one wants.
pub fn journaled(guest: u32, map: &[(u32, Vec<usize>)]) -> Value {
    let mut entry = json!({ "guest": guest, "vcpu_to_cpus": map });
    if map.iter().all(|(_, set)| set.len() == 1) {
        let one: Vec<(u32, usize)> = map.iter().map(|(v, set)| (*v, set[0])).collect();
        entry["vcpu_to_cpu"] = json!(one);
    }
    entry
}

/// The pins that failed outright, from what `pin_all` journals per guest (`error`).
pub fn failed(pinning: &Value) -> Vec<String> {
    pinning
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| Some(format!("guest {}: {}", g["guest"], g["error"].as_str()?)))
        .collect()
}

/// A thread's affinity on this machine, from /proc (`Cpus_allowed_list`).
pub fn affinity_of(tid: i32) -> Result<Vec<usize>, String> {
    let path = format!("/proc/{tid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|l| ocrig_payload::probe::tracefs::parse_cpu_list(l.trim()))
        .ok_or_else(|| format!("{path} has no Cpus_allowed_list"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_that_hold_are_recorded_as_read() {
        let (a, b) = ([vec![0], vec![1]], [vec![0, 1]]);
        let guests = [
            GuestPins {
                guest: 0,
                planned: &a,
                tids: &[10, 11],
            },
            GuestPins {
                guest: 1,
                planned: &b,
                tids: &[20],
            },
        ];
        let read = |tid: i32| {
            Ok(match tid {
                10 => vec![0],
                11 => vec![1],
                _ => vec![1, 0],
            })
        };
        let held = verify(&guests, read).unwrap();
        assert_eq!(
            held,
            json!([
                {"guest": 0, "vcpu_to_cpus": [[0, [0]], [1, [1]]], "vcpu_to_cpu": [[0, 0], [1, 1]]},
                {"guest": 1, "vcpu_to_cpus": [[0, [0, 1]]]},
            ])
        );
    }

    #[test]
    fn a_pin_that_did_not_take_or_cannot_be_read_fails_with_the_reason() {
        let planned = [vec![2], vec![3]];
        let guests = [GuestPins {
            guest: 0,
            planned: &planned,
            tids: &[10, 11],
        }];
        let read = |tid: i32| match tid {
            10 => Ok(vec![0, 1, 2, 3]),
            _ => Err("reading /proc/11/status: No such file or directory".to_string()),
        };
        let e = verify(&guests, read).unwrap_err();
        assert!(
            e.contains("guest 0 vCPU 0 (thread 10) runs on CPUs [0, 1, 2, 3], not the [2] it was pinned to"),
            "{e}"
        );
        assert!(
            e.contains("guest 0 vCPU 1 (thread 11): reading /proc/11/status"),
            "{e}"
        );
    }

    #[test]
    fn failed_pins_are_found_in_the_journaled_pinning() {
        let pinning = json!([
            {"guest": 0, "vcpu_to_cpus": [[0, [1]]]},
            {"guest": 1, "error": "pinning vCPU 0 of g1: Invalid argument"},
        ]);
        assert_eq!(
            failed(&pinning),
            ["guest 1: pinning vCPU 0 of g1: Invalid argument"]
        );
    }

    #[test]
    fn this_thread_s_affinity_reads_back() {
        let me = rustix::thread::gettid().as_raw_nonzero().get();
        let got = affinity_of(me).unwrap();
        assert_eq!(got, crate::host::allowed_cpus());
    }
}
