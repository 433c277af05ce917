//! The tests of ocrig's commands that boot no guest: bad input refused before anything boots
//! (`cli_errors`, `scenario_errors`, `validate_trace_events`) and the HTML report in a real
//! browser (`report_browser`). One test binary; the tests that boot guests are `tests/guests`.

mod architecture;
mod cli_errors;
mod conventions;
mod docs_links;
mod overrides;
mod report_browser;
mod scenario_errors;
mod schema;
mod setup_plan;
mod validate_trace_events;
mod workloads;
