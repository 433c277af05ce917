//! Telemetry around a run, to explain its numbers: how long each vCPU waited for a host CPU
//! ([`vcpu`]), what the guest's and the host's CPUs did ([`cpu_stat`]), what KVM counted per
//! VM ([`kvm`]), all taken by one [`probe::RunProbe`] around the run. /proc is read through
//! the `procfs` crate.

pub mod cpu_stat;
pub mod guest_tsc;
pub mod host_handover;
pub mod host_load;
pub mod host_record;
pub mod host_speed;
pub mod kvm;
pub mod orchestrator;
pub mod probe;
pub mod run_window;
pub mod sched_trace;
pub mod stretched_on_host;
pub mod vcpu;
