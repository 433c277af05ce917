//! Trace events and profiling a scenario asks of its guest kernels: each event named must exist
//! in the kernel it runs on, the sampling rate must be one the kernel takes.

use crate::scenario::locate::Seg;
use crate::scenario::{BackendKind, Loaded, ScenarioErrors};

/// Checks that need the accelerator: `accel: kvm` where the user running QEMU cannot open
/// /dev/kvm (or there is no usable KVM), `cpu:` models the accelerator cannot run (`host` is
/// KVM's: QEMU refuses it under TCG at start, "CPU model 'host' requires KVM or HVF"), and a
/// A variant's `trace_events`: each `system:name` (what tracefs calls it), none twice. Whether
/// the guest kernel has them is only known in the guest: the payload refuses a missing one
/// naming the event and the kernel (exit 2).
pub(crate) fn trace_event_problems(events: &[String]) -> Vec<(usize, String)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Err(msg) = ocrig_payload::probe::tracefs::Event::parse(e) {
            out.push((i, msg));
        } else if !seen.insert(e.as_str()) {
            out.push((i, format!("'{e}' is listed twice")));
        }
    }
    out
}

/// Each variant's `trace_events` against its guest kernel's event list, read from the
/// kernel's image where that image is already built (nothing is built or downloaded here; see
/// [`crate::image::trace_events`]): an event the kernel lacks is an error at its line, naming
/// the kernel. Where the list is not known (no image built yet, a kernel without tracing, a
/// module event with the user's own initrd) the returned notes say so, and the payload refuses
/// a missing event in the guest. The host backend has no guest kernel: nothing to check.
pub fn check_trace_events(l: &Loaded) -> Result<Vec<String>, ScenarioErrors> {
    use crate::image::trace_events::Verdict;
    let s = &l.scenario;
    if s.host.backend == BackendKind::Host {
        return Ok(Vec::new());
    }
    let cache = crate::image::cache_dir();
    let (mut errs, mut notes) = (Vec::new(), Vec::new());
    for (i, v) in s
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.trace_events.is_empty())
    {
        let kernel = v.kernel.as_ref().unwrap_or(&s.guest.kernel);
        let spec = crate::image::ImageSpec {
            kernel: kernel.source(),
            packages: crate::scenario::normalised_packages(&s.guest.packages),
        };
        let img = match crate::image::cached(&spec, &cache) {
            Ok(Some(img)) => img,
            Ok(None) => {
                notes.push(format!(
                    "variant {}: its guest image is not built yet, so its kernel's trace events are checked in the guest (`ocrig image build` first checks them here)",
                    v.name
                ));
                continue;
            }
            Err(e) => {
                notes.push(format!(
                    "variant {}: trace events checked in the guest: {e:#}",
                    v.name
                ));
                continue;
            }
        };
        let list = match crate::image::trace_events::of_image(&img) {
            Ok(list) => list,
            Err(why) => {
                notes.push(format!(
                    "variant {}: kernel {}'s trace events are not known before boot ({why}); the guest checks them",
                    v.name, img.identity.release
                ));
                continue;
            }
        };
        for (j, e) in v.trace_events.iter().enumerate() {
            match list.check(e) {
                Verdict::Present => {}
                Verdict::Missing(why) => errs.push(l.error_at(
                    &[
                        Seg::Key("variants".into()),
                        Seg::Index(i),
                        Seg::Key("trace_events".into()),
                        Seg::Index(j),
                    ],
                    format!(
                        "the guest kernel {} ({}) has no trace event '{e}': {why}",
                        img.identity.release, img.identity.source
                    ),
                )),
                Verdict::Unknown(why) => notes.push(format!(
                    "variant {}: '{e}' is checked in the guest: {why}",
                    v.name
                )),
            }
        }
    }
    if errs.is_empty() {
        Ok(notes)
    } else {
        Err(ScenarioErrors(errs))
    }
}

/// A profile's rate: 1 up to the kernel's default `perf_event_max_sample_rate` (the guest may
/// have lowered its own since; the payload refuses a rate above that, exit 2).
pub(crate) fn check_profile_rate(hz: u64) -> Result<(), String> {
    let max = ocrig_payload::probe::profile::DEFAULT_MAX_SAMPLE_RATE;
    if (1..=max).contains(&hz) {
        Ok(())
    } else {
        Err(format!(
            "{hz} Hz is outside the allowed range 1..={max} (perf_event_max_sample_rate)"
        ))
    }
}
